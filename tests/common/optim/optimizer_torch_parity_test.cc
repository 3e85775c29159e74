// Every dense update rule (AllOptimizerKinds) against PyTorch's (torch.optim's SGD, SGD with
// momentum, Adam, AdamW and Adagrad, with weight decay, under StepLR), update by update: the
// weights agree to 1e-5 relative after each of eight updates. Skipped where /usr/bin/python3 has no
// torch (Debian's python3-torch).

#include <string>
#include <vector>

#include "common/optim/optimizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/base/random_vector.h"
#include "tests/support/torch_reference.h"

#ifndef PS_TORCH_OPTIMIZER_REFERENCE
#error "PS_TORCH_OPTIMIZER_REFERENCE: the path of torch_optimizer_reference.py"
#endif

namespace ps {
namespace {

class OptimizerTorchParity : public TorchParityTest {};

TEST_F(OptimizerTorchParity, EveryRuleWithWeightDecayUnderAStepScheduleMatchesPyTorch) {
  constexpr int64_t kSize = 257;
  constexpr int kUpdates = 8;
  const std::vector<float> initial = RandomVector(kSize, 1, -1.0f, 1.0f);
  const std::vector<float> gradients = RandomVector(kSize * kUpdates, 2, -0.5f, 0.5f);
  const std::vector<OptimizerKind>& kinds = AllOptimizerKinds();
  std::vector<OptimizerOptions> options;
  nlohmann::json configs = nlohmann::json::array();
  for (OptimizerKind kind : kinds) {
    OptimizerOptions o;
    o.kind = kind;
    o.lr = 0.05f;
    o.momentum = 0.8f;
    o.beta1 = 0.85f;
    o.beta2 = 0.99f;
    o.epsilon = 1e-6f;
    o.weight_decay = 0.1f;
    o.schedule = LrSchedule::kStep;
    o.lr_step_updates = 3;
    o.lr_step_gamma = 0.5f;
    o.apply_threads = 1;
    ASSERT_TRUE(ValidateOptimizerOptions(o).ok());
    options.push_back(o);
    configs.push_back({{"kind", OptimizerKindName(kind)},
                       {"lr", o.lr},
                       {"momentum", o.momentum},
                       {"beta1", o.beta1},
                       {"beta2", o.beta2},
                       {"epsilon", o.epsilon},
                       {"weight_decay", o.weight_decay},
                       {"step_updates", o.lr_step_updates},
                       {"step_gamma", o.lr_step_gamma}});
  }
  Write("configs.json", configs.dump());
  WriteRaw(Path("weights.f32"), initial);
  WriteRaw(Path("gradients.f32"), gradients);
  ASSERT_TRUE(RunReference(PS_TORCH_OPTIMIZER_REFERENCE, dir_));
  const std::vector<float> reference = ReadFloats(Path("torch.f32"));
  ASSERT_EQ(reference.size(), kinds.size() * gradients.size());

  for (size_t k = 0; k < kinds.size(); ++k) {
    Optimizer optimizer(options[k], kSize);
    std::vector<float> w = initial;
    for (int u = 0; u < kUpdates; ++u) {
      optimizer.Apply(u, absl::MakeConstSpan(gradients).subspan(u * kSize, kSize),
                      absl::MakeSpan(w));
      const float* want = reference.data() + (k * kUpdates + u) * kSize;
      ExpectClose(w.data(), want, kSize,
                  OptimizerKindName(kinds[k]) + " after update " + std::to_string(u + 1), 1e-5);
    }
  }
}

}  // namespace
}  // namespace ps
