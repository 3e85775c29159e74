// The gpt model against a PyTorch reference of the same weights (bench/peers/pytorch_gpt.py,
// computed in float64): the logits, the loss and every gradient agree to 1e-4 relative. Skipped
// where /usr/bin/python3 has no torch (Debian's python3-torch).

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "common/device/cpu_device.h"
#include "common/nn/model_registry.h"
#include "gtest/gtest.h"
#include "tests/common/base/random_vector.h"
#include "tests/support/torch_reference.h"

#ifndef PS_PYTORCH_GPT
#error "PS_PYTORCH_GPT: the path of bench/peers/pytorch_gpt.py"
#endif

namespace ps {
namespace {

class GptTorchParity : public TorchParityTest {};

TEST_F(GptTorchParity, LogitsLossAndEveryGradientMatchPyTorch) {
  const int vocab = 11, context = 8, layers = 2, heads = 2, dim = 16, batch = 3;
  CpuDevice dev;
  auto made = MakeGpt(vocab, context, layers, heads, dim, dev, batch);
  ASSERT_TRUE(made.ok()) << made.status();
  Model& model = **made;
  std::vector<float> params(model.layout().total());
  model.InitParams(5, params.data());
  // Weights larger than the init's, so that the attention is not near uniform.
  const std::vector<float> noise = RandomVector(params.size(), 6, -0.2f, 0.2f);
  for (size_t i = 0; i < params.size(); ++i) params[i] += noise[i];
  std::vector<int32_t> tokens(batch * context), labels(batch * context);
  Rng rng(7);
  for (int i = 0; i < batch * context; ++i) {
    tokens[i] = static_cast<int32_t>(rng.Below(vocab));
    labels[i] = static_cast<int32_t>(rng.Below(vocab));
  }
  const std::vector<float> x(tokens.begin(), tokens.end());
  std::vector<float> grads(params.size());
  auto stats = model.ForwardBackward(params.data(), x.data(), labels.data(), batch, 1.0f,
                                     grads.data(), {}, /*overwrite_grads=*/true);
  ASSERT_TRUE(stats.ok()) << stats.status();
  const std::vector<float> logits(model.logits(), model.logits() + batch * context * vocab);

  std::ofstream(Path("meta.json"))
      << "{\"vocab\":" << vocab << ",\"context\":" << context << ",\"layers\":" << layers
      << ",\"heads\":" << heads << ",\"dim\":" << dim << ",\"batch\":" << batch << "}";
  WriteRaw(Path("params.f32"), params);
  WriteRaw(Path("tokens.i32"), tokens);
  WriteRaw(Path("labels.i32"), labels);
  ASSERT_TRUE(RunReference(PS_PYTORCH_GPT, "--check " + dir_));
  const std::vector<float> reference = ReadFloats(Path("torch.f32"));
  ASSERT_EQ(reference.size(), logits.size() + 1 + params.size());
  ExpectClose(logits.data(), reference.data(), logits.size(), "logits");
  const float loss = static_cast<float>(stats->loss_sum / stats->count);
  ExpectClose(&loss, reference.data() + logits.size(), 1, "loss");
  int64_t at = 0;
  for (const TensorSpec& t : model.layout().tensors()) {
    ExpectClose(grads.data() + at, reference.data() + logits.size() + 1 + at, t.NumElements(),
                "d " + t.name);
    at += t.NumElements();
  }
}

}  // namespace
}  // namespace ps
