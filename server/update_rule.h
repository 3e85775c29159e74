#ifndef PS_SERVER_UPDATE_RULE_H_
#define PS_SERVER_UPDATE_RULE_H_

// How a shard applies a gradient that arrives stale (SSP and ASP; under BSP every gradient is
// fresh and the rules reduce to plain).

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ps {

enum class UpdateRule {
  kPlain,        // apply as is
  kStalenessLr,  // learning rate / (staleness + 1) (Zhang et al., IJCAI 2016)
  kDcAsgd,       // delay compensation with lambda (Zheng et al., ICML 2017)
  kDropStale,    // gradients staler than drop_above are acknowledged, counted, not applied
};

absl::StatusOr<UpdateRule> ParseUpdateRule(const std::string& name);
std::string UpdateRuleName(UpdateRule rule);

struct UpdateRuleOptions {
  UpdateRule rule = UpdateRule::kPlain;
  float dc_lambda = 0.04f;  // kDcAsgd's lambda (the paper's constant variant)
  int64_t drop_above = 4;   // kDropStale: staleness > drop_above is dropped
};

absl::Status ValidateUpdateRuleOptions(const UpdateRuleOptions& options);

}  // namespace ps

#endif  // PS_SERVER_UPDATE_RULE_H_
