// The transformer's pieces on the CPU device: each op and layer against central differences,
// the attention's causality, and the whole gpt model's gradients and its refusals.

#include <cmath>
#include <vector>

#include "common/device/cpu_device.h"
#include "common/nn/model_registry.h"
#include "common/nn/transformer_layers.h"
#include "gtest/gtest.h"
#include "tests/common/base/random_vector.h"
#include "tests/common/device/deferred_copy_device.h"
#include "tests/common/nn/finite_difference.h"

namespace ps {
namespace {

// Checks a layer's input and parameter gradients against central differences of sum(y * r).
void CheckLayer(Layer& layer, int batch, std::vector<float> x, std::vector<float> params,
                double tolerance, bool input_gradient = true) {
  CpuDevice dev;
  ASSERT_TRUE(layer.Prepare(dev, batch).ok());
  const std::vector<float> r = RandomVector(batch * layer.output_size(), 77);
  std::vector<float> y(batch * layer.output_size()), dx(x.size());
  std::vector<float> grads(params.size(), 5.0f);  // overwritten: grads_beta 0
  ASSERT_TRUE(layer.Forward(dev, {params.data(), x.data(), batch, y.data()}).ok());
  ASSERT_TRUE(layer
                  .Backward(dev, {params.data(), x.data(), y.data(), r.data(), batch,
                                  input_gradient ? dx.data() : nullptr, grads.data(), 0.0f})
                  .ok());
  auto objective = [&] { return Weighted(layer, dev, params.data(), x, batch, r); };
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_NEAR(grads[i], Central(params, i, objective), tolerance) << "param " << i;
  }
  if (!input_gradient) return;
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(dx[i], Central(x, i, objective), tolerance) << "input " << i;
  }
}

std::vector<float> Params(const Layer& layer, uint64_t seed) {
  int64_t n = 0;
  for (const TensorSpec& s : layer.ParamSpecs()) n += s.NumElements();
  return RandomVector(n, seed, -0.5f, 0.5f);
}

TEST(Gelu, MatchesItsFormulaAndItsDerivative) {
  CpuDevice dev;
  std::vector<float> x = {-3.0f, -1.0f, -0.1f, 0.0f, 0.5f, 2.0f};
  std::vector<float> y(x.size()), dy(x.size(), 1.0f), dx(x.size());
  ASSERT_TRUE(dev.GeluForward(x.size(), x.data(), y.data()).ok());
  EXPECT_NEAR(y[4], 0.5 * 0.5 * (1 + std::tanh(std::sqrt(2 / M_PI) * (0.5 + 0.044715 * 0.125))),
              1e-7);
  EXPECT_EQ(y[3], 0.0f);
  ASSERT_TRUE(dev.GeluBackward(x.size(), x.data(), dy.data(), dx.data()).ok());
  for (size_t i = 0; i < x.size(); ++i) {
    auto f = [&] {
      std::vector<float> out(x.size());
      EXPECT_TRUE(dev.GeluForward(x.size(), x.data(), out.data()).ok());
      return static_cast<double>(out[i]);
    };
    EXPECT_NEAR(dx[i], Central(x, i, f), 1e-3) << i;
  }
}

// The device computes tanh through its own vectorisable exp: within 1e-6 of the formula with
// libm's tanh over the range that matters (and saturating beyond).
TEST(Gelu, StaysWithinAMillionthOfTheFormulaEverywhere) {
  CpuDevice dev;
  std::vector<float> x;
  for (int i = -2000; i <= 2000; ++i) x.push_back(static_cast<float>(i) * 0.01f);
  x.push_back(-100.0f);
  x.push_back(100.0f);
  std::vector<float> y(x.size()), dx(x.size()), ones(x.size(), 1.0f);
  ASSERT_TRUE(dev.GeluForward(x.size(), x.data(), y.data()).ok());
  ASSERT_TRUE(dev.GeluBackward(x.size(), x.data(), ones.data(), dx.data()).ok());
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double u = std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v);
    const double th = std::tanh(u);
    const double exact = 0.5 * v * (1 + th);
    const double slope =
        0.5 * (1 + th) + 0.5 * v * (1 - th * th) * std::sqrt(2 / M_PI) * (1 + 3 * 0.044715 * v * v);
    EXPECT_NEAR(y[i], exact, 1e-6 * std::max(1.0, std::abs(v))) << v;
    EXPECT_NEAR(dx[i], slope, 2e-6) << v;
  }
}

TEST(CausalAttention, AQueryAttendsToItselfAndEarlierPositionsOnly) {
  CpuDevice dev;
  const int batch = 1, t = 4, heads = 2, hd = 3, c = heads * hd;
  const std::vector<float> qkv = RandomVector(batch * t * 3 * c, 3);
  std::vector<float> att(batch * heads * t * t), out(batch * t * c);
  ASSERT_TRUE(
      dev.CausalAttentionForward(batch, t, heads, hd, qkv.data(), att.data(), out.data()).ok());
  for (int h = 0; h < heads; ++h) {
    for (int i = 0; i < t; ++i) {
      double total = 0;
      for (int j = 0; j < t; ++j) {
        const float w = att[(h * t + i) * t + j];
        if (j > i) {
          EXPECT_EQ(w, 0.0f) << h << " " << i << " " << j;
        }
        total += w;
      }
      EXPECT_NEAR(total, 1.0, 1e-6);
    }
  }
  // Position 0 sees only itself: its output is its own value.
  for (int h = 0; h < heads; ++h) {
    for (int d = 0; d < hd; ++d) EXPECT_FLOAT_EQ(out[h * hd + d], qkv[2 * c + h * hd + d]);
  }
  // Changing a later position's key or value leaves earlier outputs unchanged.
  std::vector<float> later = qkv;
  for (int k = 0; k < 3 * c; ++k) later[3 * 3 * c + k] += 1.0f;  // position 3
  std::vector<float> out2(out.size());
  ASSERT_TRUE(
      dev.CausalAttentionForward(batch, t, heads, hd, later.data(), att.data(), out2.data()).ok());
  for (int k = 0; k < 3 * c; ++k) EXPECT_EQ(out2[k], out[k]) << k;
}

TEST(CausalAttention, GradientMatchesFiniteDifferences) {
  CpuDevice dev;
  const int batch = 2, t = 3, heads = 2, hd = 2, c = heads * hd;
  std::vector<float> qkv = RandomVector(batch * t * 3 * c, 4);
  const std::vector<float> r = RandomVector(batch * t * c, 5);
  std::vector<float> att(batch * heads * t * t), out(batch * t * c), dqkv(qkv.size());
  ASSERT_TRUE(
      dev.CausalAttentionForward(batch, t, heads, hd, qkv.data(), att.data(), out.data()).ok());
  ASSERT_TRUE(dev.CausalAttentionBackward(batch, t, heads, hd, qkv.data(), att.data(), r.data(),
                                          dqkv.data())
                  .ok());
  auto objective = [&] {
    std::vector<float> a(att.size()), o(out.size());
    EXPECT_TRUE(
        dev.CausalAttentionForward(batch, t, heads, hd, qkv.data(), a.data(), o.data()).ok());
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += static_cast<double>(o[i]) * r[i];
    return s;
  };
  for (size_t i = 0; i < qkv.size(); ++i) {
    EXPECT_NEAR(dqkv[i], Central(qkv, i, objective), 1e-3) << i;
  }
}

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  LayerNorm layer("ln", /*tokens=*/3, /*dim=*/5);
  CheckLayer(layer, 2, RandomVector(2 * 15, 6, -2.0f, 2.0f), Params(layer, 7), 2e-3);
}

TEST(LayerNorm, NormalisesEachPositionAndStartsAsTheIdentityScale) {
  CpuDevice dev;
  LayerNorm layer("ln", 2, 4);
  ASSERT_TRUE(layer.Prepare(dev, 1).ok());
  std::vector<float> params(8);
  Rng rng(1);
  layer.InitParams(rng, params.data());
  EXPECT_EQ(params, (std::vector<float>{1, 1, 1, 1, 0, 0, 0, 0}));
  const std::vector<float> x = {1, 2, 3, 4, 10, 10, 10, 14};
  std::vector<float> y(8);
  ASSERT_TRUE(layer.Forward(dev, {params.data(), x.data(), 1, y.data()}).ok());
  // (x - 2.5) / sqrt(1.25 + 1e-5) and (x - 11) / sqrt(3 + 1e-5).
  EXPECT_NEAR(y[0], -1.5 / std::sqrt(1.25 + 1e-5), 1e-6);
  EXPECT_NEAR(y[7], 3.0 / std::sqrt(3.0 + 1e-5), 1e-6);
}

TEST(TokenPositionEmbedding, AddsTheTokensAndThePositionsRowsAndScattersTheirGradients) {
  TokenPositionEmbedding layer(/*vocab=*/5, /*tokens=*/3, /*dim=*/2);
  const std::vector<float> ids = {4, 0, 4, 1, 1, 2};  // token 4 twice in sample 0, 1 twice in 1
  const std::vector<float> params = Params(layer, 8);
  CpuDevice dev;
  std::vector<float> y(12);
  ASSERT_TRUE(layer.Forward(dev, {params.data(), ids.data(), 2, y.data()}).ok());
  // Sample 1, position 2: wte[2] + wpe[2] (wpe after the 5 x 2 of wte).
  EXPECT_FLOAT_EQ(y[(3 + 2) * 2], params[2 * 2] + params[10 + 2 * 2]);
  CheckLayer(layer, 2, ids, params, 1e-3, /*input_gradient=*/false);
  const std::vector<float> bad = {0, 5, 1};
  EXPECT_EQ(layer.Forward(dev, {params.data(), bad.data(), 1, y.data()}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TokenPositionEmbedding, RefusesTheSameIdsForwardAndBackward) {
  // Not an integer, below 0, past the vocabulary, past int's range, NaN: refused both ways, as the
  // GPU refuses them.
  CpuDevice dev;
  const int vocab = 5, dim = 2;
  const std::vector<float> wte(vocab * dim, 1.0f), wpe(dim, 1.0f), dy(dim, 1.0f);
  std::vector<float> y(dim), dwte(wte.size()), dwpe(wpe.size());
  for (const float id : {1.5f, -1.0f, 5.0f, 1e10f, std::nanf("")}) {
    EXPECT_EQ(
        dev.TokenEmbeddingForward(1, 1, dim, vocab, &id, wte.data(), wpe.data(), y.data()).code(),
        absl::StatusCode::kInvalidArgument)
        << id;
    EXPECT_EQ(
        dev.TokenEmbeddingBackward(1, 1, dim, vocab, &id, dy.data(), dwte.data(), dwpe.data(), 0.0f)
            .code(),
        absl::StatusCode::kInvalidArgument)
        << id;
  }
  const float last = 4.0f;
  EXPECT_TRUE(
      dev.TokenEmbeddingBackward(1, 1, dim, vocab, &last, dy.data(), dwte.data(), dwpe.data(), 0.0f)
          .ok());
  EXPECT_EQ(dwte[4 * dim], 1.0f);
  EXPECT_EQ(dwte[0], 0.0f);
}

TEST(Linear, PerPositionWithoutBiasMatchesFiniteDifferences) {
  Linear layer("head", /*in=*/3, /*out=*/4, /*positions=*/2, /*bias=*/false);
  EXPECT_EQ(layer.input_size(), 6);
  EXPECT_EQ(layer.output_size(), 8);
  ASSERT_EQ(layer.ParamSpecs().size(), 1u);
  CheckLayer(layer, 2, RandomVector(12, 9), Params(layer, 10), 1e-3);
}

TEST(TransformerBlock, GradientsMatchFiniteDifferences) {
  TransformerBlock block("h0", /*tokens=*/3, /*dim=*/4, /*heads=*/2, /*layers=*/2);
  CheckLayer(block, 2, RandomVector(2 * 12, 11), Params(block, 12), 3e-3);
}

TEST(TransformerBlock, RefusesAWidthTheHeadsDoNotDivide) {
  CpuDevice dev;
  TransformerBlock block("h0", 3, 6, 4, 1);
  EXPECT_EQ(block.Prepare(dev, 1).code(), absl::StatusCode::kInvalidArgument);
}

// A model whose memory for the batch is beyond the device's says which layer and batch asked.
TEST(Gpt, MemoryBeyondTheDeviceNamesTheLayerAndTheBatch) {
  DeferredCopyDevice dev;
  dev.set_allocation_limit(size_t{1} << 20);
  // The attention's scores: 8 windows x 2 heads x 256 x 256 positions of 4 bytes, 4 MiB.
  auto made = MakeGpt(/*vocab=*/6, /*context=*/256, /*layers=*/1, /*heads=*/2, /*dim=*/4, dev, 8);
  ASSERT_EQ(made.status().code(), absl::StatusCode::kResourceExhausted) << made.status();
  EXPECT_EQ(made.status().message().substr(0, 46), "layer 1 of the model, for a batch of 8: cannot")
      << made.status();
}

// The whole model: 2 windows of 4 tokens, vocabulary 6, 2 blocks of width 4 with 2 heads;
// every parameter against central differences of the mean loss per token.
TEST(Gpt, WholeModelGradientsMatchFiniteDifferences) {
  CpuDevice dev;
  const int batch = 2, context = 4, vocab = 6;
  auto made = MakeGpt(vocab, context, /*layers=*/2, /*heads=*/2, /*dim=*/4, dev, batch);
  ASSERT_TRUE(made.ok()) << made.status();
  Model& model = **made;
  EXPECT_EQ(model.num_classes(), vocab);
  EXPECT_EQ(model.labels_per_sample(), context);
  std::vector<float> params(model.layout().total());
  model.InitParams(3, params.data());
  // Larger weights than GPT-2's init, so every path carries gradient worth checking.
  const std::vector<float> noise = RandomVector(params.size(), 13, -0.3f, 0.3f);
  for (size_t i = 0; i < params.size(); ++i) params[i] += noise[i];
  const std::vector<float> x = {0, 3, 5, 1, 2, 2, 4, 0};
  const std::vector<int32_t> labels = {3, 5, 1, 2, 2, 4, 0, 1};
  std::vector<float> grads(params.size());
  auto stats = model.ForwardBackward(params.data(), x.data(), labels.data(), batch, 1.0f,
                                     grads.data(), {}, /*overwrite_grads=*/true);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->count, batch * context);
  auto mean_loss = [&] {
    auto s = model.Evaluate(params.data(), x.data(), labels.data(), batch);
    EXPECT_TRUE(s.ok());
    return s->loss_sum / s->count;
  };
  EXPECT_NEAR(stats->loss_sum / stats->count, mean_loss(), 1e-6);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_NEAR(grads[i], Central(params, i, mean_loss), 2e-3) << "param " << i;
  }
}

TEST(Gpt, BuildsByNameForTextWindowsOnly) {
  CpuDevice dev;
  SampleShape text;
  text.features = 8;
  text.labels = 8;
  text.num_classes = 30;
  ModelSpec spec;
  spec.name = "gpt";
  spec.layers = 2;
  spec.heads = 2;
  spec.dim = 16;
  auto gpt = MakeModel(spec, text, dev, 4);
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  // wte, wpe; per block 2 x 2c + 3c^2 + 3c + c^2 + c + 4c^2 + 4c + 4c^2 + c; ln_f; the head.
  const int64_t c = 16;
  EXPECT_EQ((*gpt)->layout().total(), 30 * c + 8 * c + 2 * (12 * c * c + 13 * c) + 2 * c + c * 30);
  const SampleShape images{784, 10, ImageShape{}, 0};
  EXPECT_EQ(MakeModel(spec, images, dev, 4).status().code(), absl::StatusCode::kInvalidArgument);
  spec.heads = 3;
  EXPECT_EQ(MakeModel(spec, text, dev, 4).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
