#include "server/update_rule.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/base/enum_names.h"

namespace ps {

namespace {

constexpr EnumName<UpdateRule> kRuleNames[] = {{UpdateRule::kPlain, "plain"},
                                               {UpdateRule::kStalenessLr, "staleness_lr"},
                                               {UpdateRule::kDcAsgd, "dc_asgd"},
                                               {UpdateRule::kDropStale, "drop"}};

}  // namespace

absl::StatusOr<UpdateRule> ParseUpdateRule(const std::string& name) {
  return ParseIn(kRuleNames, name, "update rule");
}

std::string UpdateRuleName(UpdateRule rule) { return NameIn(kRuleNames, rule); }

absl::Status ValidateUpdateRuleOptions(const UpdateRuleOptions& o) {
  if (!(o.dc_lambda >= 0.0f) || !std::isfinite(o.dc_lambda)) {
    return absl::InvalidArgumentError(absl::StrCat("dc_lambda must be >= 0, got ", o.dc_lambda));
  }
  if (o.drop_above < 0) {
    return absl::InvalidArgumentError(absl::StrCat("drop_above must be >= 0, got ", o.drop_above));
  }
  return absl::OkStatus();
}

}  // namespace ps
