#include "common/cli/client_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, servers, "127.0.0.1:5000",
          "Comma-separated host:port of shard 0, 1, ... in shard order.");
ABSL_FLAG(std::string, weights_out, "",
          "Write the weights as raw float32 here (ps_worker: with "
          "--evaluate, the shards' current weights; ps_replay: the replayed run's final ones).");
