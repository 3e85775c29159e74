#include "common/consistency_mode.h"

#include "absl/strings/str_cat.h"

namespace ps {

absl::StatusOr<ConsistencyMode> ParseConsistencyMode(const std::string& name) {
  if (name == "bsp") return ConsistencyMode::kBsp;
  if (name == "ssp") return ConsistencyMode::kSsp;
  if (name == "asp") return ConsistencyMode::kAsp;
  return absl::InvalidArgumentError(absl::StrCat("unknown mode '", name, "' (bsp|ssp|asp)"));
}

std::string ConsistencyModeName(ConsistencyMode mode) {
  switch (mode) {
    case ConsistencyMode::kBsp:
      return "bsp";
    case ConsistencyMode::kSsp:
      return "ssp";
    case ConsistencyMode::kAsp:
      return "asp";
  }
  return "unknown";
}

}  // namespace ps
