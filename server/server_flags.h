#ifndef PS_SERVER_SERVER_FLAGS_H_
#define PS_SERVER_SERVER_FLAGS_H_

// The flags of ps_server that ps_launch also takes and passes on to its shards by name (see
// ForwardedFlags): defined once, here. The consistency mode and its bound, how stale gradients
// are applied, backup workers, the lease, checkpoint frequency, and a fault switch for tests.
// For main() files only.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, mode);
ABSL_DECLARE_FLAG(int32_t, staleness);
ABSL_DECLARE_FLAG(std::string, update_rule);
ABSL_DECLARE_FLAG(double, dc_lambda);
ABSL_DECLARE_FLAG(int64_t, drop_above);
ABSL_DECLARE_FLAG(int32_t, backup_workers);
ABSL_DECLARE_FLAG(int64_t, lease_ms);
ABSL_DECLARE_FLAG(int64_t, checkpoint_every);
ABSL_DECLARE_FLAG(double, checkpoint_seconds);
ABSL_DECLARE_FLAG(int32_t, fault_drop_push_reply_every);

namespace ps {

// The names above, for a launcher that passes them on.
std::vector<std::string> ServerFlagNames();

}  // namespace ps

#endif  // PS_SERVER_SERVER_FLAGS_H_
