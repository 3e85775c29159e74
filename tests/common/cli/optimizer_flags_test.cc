#include "common/cli/optimizer_flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(double, lr);
ABSL_DECLARE_FLAG(int64_t, base_batch);
ABSL_DECLARE_FLAG(int64_t, effective_batch);
ABSL_DECLARE_FLAG(std::string, lr_scaling);
ABSL_DECLARE_FLAG(std::string, optimizer);

namespace ps {
namespace {

// The peak learning rate the shards take from --lr, --base_batch, --effective_batch,
// --lr_scaling and --optimizer.
absl::StatusOr<float> PeakLr(double lr, int64_t base, int64_t effective, const std::string& rule,
                             const std::string& optimizer = "adam") {
  absl::SetFlag(&FLAGS_optimizer, optimizer);
  absl::SetFlag(&FLAGS_lr, lr);
  absl::SetFlag(&FLAGS_base_batch, base);
  absl::SetFlag(&FLAGS_effective_batch, effective);
  absl::SetFlag(&FLAGS_lr_scaling, rule);
  absl::StatusOr<OptimizerOptions> options = OptimizerOptionsFromFlags();
  if (!options.ok()) return options.status();
  return options->lr;
}

TEST(OptimizerOptionsFromFlags, ScalesTheLearningRateByTheChosenRule) {
  EXPECT_EQ(*PeakLr(0.001, 32, 128, "linear"), 0.004f);
  EXPECT_EQ(*PeakLr(0.001, 32, 128, "sqrt"), 0.002f);
  EXPECT_EQ(*PeakLr(0.001, 0, 128, "sqrt"), 0.001f);  // no base batch: no scaling
}

TEST(OptimizerOptionsFromFlags, AutoScalesEachOptimizerByItsOwnRule) {
  EXPECT_EQ(absl::FindCommandLineFlag("lr_scaling")->DefaultValue(), "auto");
  EXPECT_EQ(*PeakLr(0.001, 32, 128, "auto", "adam"), 0.002f);
  EXPECT_EQ(*PeakLr(0.001, 32, 128, "auto", "adagrad"), 0.002f);
  EXPECT_EQ(*PeakLr(0.01, 32, 128, "auto", "momentum"), 0.04f);
  EXPECT_EQ(*PeakLr(0.01, 32, 128, "auto", "sgd"), 0.04f);
  EXPECT_EQ(*PeakLr(0.01, 32, 128, "sqrt", "sgd"), 0.02f);  // a named rule is kept
}

TEST(OptimizerOptionsFromFlags, RefusesAnUnknownRuleAndABaseBatchWithoutAnEffectiveOne) {
  EXPECT_EQ(PeakLr(0.001, 32, 128, "cube").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PeakLr(0.001, 32, 0, "sqrt").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
