#ifndef PS_SERVER_SERVER_FLAGS_H_
#define PS_SERVER_SERVER_FLAGS_H_

// The flags of ps_server that ps_launch also takes: defined once, here, and passed on to every
// shard by ps_launch (ForwardedFlagsOf("server/server_flags.cc") passes every flag this file's
// .cc defines). The consistency mode and its bound, how stale gradients are applied, backup
// workers, the lease, checkpoint frequency, and a fault switch for tests. For main() files only.

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, mode);
ABSL_DECLARE_FLAG(int32_t, staleness);
ABSL_DECLARE_FLAG(std::string, update_rule);
ABSL_DECLARE_FLAG(double, dc_lambda);
ABSL_DECLARE_FLAG(int64_t, drop_above);
ABSL_DECLARE_FLAG(int32_t, backup_workers);
ABSL_DECLARE_FLAG(int64_t, lease_ms);
ABSL_DECLARE_FLAG(std::string, sparse_optimizer);
ABSL_DECLARE_FLAG(double, sparse_lr);
ABSL_DECLARE_FLAG(int64_t, table_capacity);
ABSL_DECLARE_FLAG(std::string, eviction);
ABSL_DECLARE_FLAG(int32_t, admit_after);
ABSL_DECLARE_FLAG(int32_t, full_checkpoint_every);
ABSL_DECLARE_FLAG(int64_t, checkpoint_every);
ABSL_DECLARE_FLAG(double, checkpoint_seconds);
ABSL_DECLARE_FLAG(int32_t, fault_drop_push_reply_every);

#endif  // PS_SERVER_SERVER_FLAGS_H_
