#include "common/base/consistency_mode.h"

#include "absl/strings/str_cat.h"
#include "common/base/enum_names.h"

namespace ps {

namespace {

constexpr EnumName<ConsistencyMode> kModeNames[] = {
    {ConsistencyMode::kBsp, "bsp"}, {ConsistencyMode::kSsp, "ssp"}, {ConsistencyMode::kAsp, "asp"}};

}  // namespace

absl::StatusOr<ConsistencyMode> ParseConsistencyMode(const std::string& name) {
  return ParseIn(kModeNames, name, "mode");
}

std::string ConsistencyModeName(ConsistencyMode mode) { return NameIn(kModeNames, mode); }

}  // namespace ps
