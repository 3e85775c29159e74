#ifndef PS_COMMON_BASE_CONSISTENCY_MODE_H_
#define PS_COMMON_BASE_CONSISTENCY_MODE_H_

// The consistency modes of DESIGN.md section 3, known to both sides: the shards enforce them
// (server/consistency.h), the workers choose their step schedule by them.

#include <string>

#include "absl/status/statusor.h"

namespace ps {

enum class ConsistencyMode { kBsp, kSsp, kAsp };

// "bsp", "ssp" or "asp"; anything else is INVALID_ARGUMENT naming the three.
absl::StatusOr<ConsistencyMode> ParseConsistencyMode(const std::string& name);
std::string ConsistencyModeName(ConsistencyMode mode);

}  // namespace ps

#endif  // PS_COMMON_BASE_CONSISTENCY_MODE_H_
