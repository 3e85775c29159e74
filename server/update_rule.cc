#include "server/update_rule.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace ps {

absl::StatusOr<UpdateRule> ParseUpdateRule(const std::string& name) {
  if (name == "plain") return UpdateRule::kPlain;
  if (name == "staleness_lr") return UpdateRule::kStalenessLr;
  if (name == "dc_asgd") return UpdateRule::kDcAsgd;
  if (name == "drop") return UpdateRule::kDropStale;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown update rule '", name, "' (plain|staleness_lr|dc_asgd|drop)"));
}

std::string UpdateRuleName(UpdateRule rule) {
  switch (rule) {
    case UpdateRule::kPlain:
      return "plain";
    case UpdateRule::kStalenessLr:
      return "staleness_lr";
    case UpdateRule::kDcAsgd:
      return "dc_asgd";
    case UpdateRule::kDropStale:
      return "drop";
  }
  return "unknown";
}

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
