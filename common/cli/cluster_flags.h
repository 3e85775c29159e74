#ifndef PS_COMMON_CLI_CLUSTER_FLAGS_H_
#define PS_COMMON_CLI_CLUSTER_FLAGS_H_

// Flags that describe the cluster the same way to both of its sides, defined once: the number of
// workers (ps_server, ps_worker, ps_replay; ps_launch sets it from --workers) and whether a
// worker and a shard on one host may use shared memory (ps_server, ps_worker; ps_launch passes
// it to both). For main() files only.

#include <cstdint>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(int32_t, num_workers);
ABSL_DECLARE_FLAG(bool, shared_memory);
ABSL_DECLARE_FLAG(bool, local_calls);

#endif  // PS_COMMON_CLI_CLUSTER_FLAGS_H_
