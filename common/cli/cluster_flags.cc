#include "common/cli/cluster_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(int32_t, num_workers, 0,
          "Workers in the job, ranks 0..N-1. ps_server and ps_replay: required (>= 1). "
          "ps_worker: checked against the shards' count (0: take theirs).");
ABSL_FLAG(bool, shared_memory, true,
          "A worker and a shard on the same host move gradients and weights through shared "
          "memory, and (--local_calls) the worker's pushes and pulls go over the shard's local "
          "Unix socket instead of gRPC; off on either side, or hosts apart: in gRPC messages.");
ABSL_FLAG(bool, local_calls, true,
          "With --shared_memory: a worker's pushes and pulls to a shard on its host go over the "
          "shard's local socket; false on either side keeps them on gRPC (payloads still "
          "through shared memory).");
