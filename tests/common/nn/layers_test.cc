// Finite-difference checks of every layer's gradients and of the whole MLP, on the CPU device.

#include "common/nn/layers.h"

#include <cmath>
#include <vector>

#include "absl/strings/match.h"
#include "common/base/random.h"
#include "common/device/cpu_device.h"
#include "common/nn/model.h"
#include "common/nn/model_registry.h"
#include "gtest/gtest.h"
#include "tests/common/base/random_vector.h"

namespace ps {
namespace {

// L = sum(y * r): dL/dy = r, so Backward(dy = r) must give dL/dparams and dL/dx.
double Objective(Layer& layer, CpuDevice& dev, const std::vector<float>& params,
                 const std::vector<float>& x, int batch, const std::vector<float>& r) {
  std::vector<float> y(batch * layer.output_size());
  EXPECT_TRUE(layer.Forward(dev, {params.data(), x.data(), batch, y.data()}).ok());
  double sum = 0.0;
  for (size_t i = 0; i < y.size(); ++i) sum += static_cast<double>(y[i]) * r[i];
  return sum;
}

void CheckLayerGradients(Layer& layer, std::vector<float> x, int batch, double tolerance) {
  CpuDevice dev;
  ASSERT_TRUE(layer.Prepare(dev, batch).ok());
  int64_t num_params = 0;
  for (const TensorSpec& s : layer.ParamSpecs()) num_params += s.NumElements();
  std::vector<float> params(num_params);
  Rng rng(7);
  layer.InitParams(rng, params.data());
  const std::vector<float> r = RandomVector(batch * layer.output_size(), 11);
  std::vector<float> y(batch * layer.output_size());
  ASSERT_TRUE(layer.Forward(dev, {params.data(), x.data(), batch, y.data()}).ok());
  // Gradients accumulate: start from a known non-zero value and subtract it afterwards.
  std::vector<float> grads(num_params, 0.5f);
  std::vector<float> dx(x.size());
  ASSERT_TRUE(layer
                  .Backward(dev, {params.data(), x.data(), y.data(), r.data(), batch, dx.data(),
                                  grads.data(), /*grads_beta=*/1.0f})
                  .ok());
  const float h = 1e-2f;
  for (int64_t i = 0; i < num_params; ++i) {
    std::vector<float> p = params;
    p[i] += h;
    const double up = Objective(layer, dev, p, x, batch, r);
    p[i] -= 2 * h;
    const double down = Objective(layer, dev, p, x, batch, r);
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(grads[i] - 0.5f, numeric, tolerance) << "param " << i;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<float> xp = x;
    xp[i] += h;
    const double up = Objective(layer, dev, params, xp, batch, r);
    xp[i] -= 2 * h;
    const double down = Objective(layer, dev, params, xp, batch, r);
    EXPECT_NEAR(dx[i], (up - down) / (2 * h), tolerance) << "input " << i;
  }
}

// Central differences of the model's mean loss for every `stride`-th parameter, beside the
// analytic gradient: {index, analytic, numeric}.
struct GradientPair {
  int64_t index;
  double analytic;
  double numeric;
};
std::vector<GradientPair> WholeModelGradients(Model& model, const std::vector<float>& params,
                                              const std::vector<float>& x,
                                              const std::vector<int32_t>& labels, float h,
                                              int64_t stride) {
  const int batch = static_cast<int>(labels.size());
  const int64_t n = model.layout().total();
  std::vector<float> grads(n, 0.0f);
  auto stats =
      model.ForwardBackward(params.data(), x.data(), labels.data(), batch, 1.0f, grads.data());
  EXPECT_TRUE(stats.ok());
  auto mean_loss = [&](const std::vector<float>& p) {
    auto s = model.Evaluate(p.data(), x.data(), labels.data(), batch);
    EXPECT_TRUE(s.ok());
    return s->loss_sum / batch;
  };
  EXPECT_NEAR(stats->loss_sum / batch, mean_loss(params), 1e-6);
  std::vector<GradientPair> out;
  for (int64_t i = 0; i < n; i += stride) {
    std::vector<float> p = params;
    p[i] += h;
    const double up = mean_loss(p);
    p[i] -= 2 * h;
    const double down = mean_loss(p);
    out.push_back({i, grads[i], (up - down) / (2 * h)});
  }
  return out;
}

TEST(Linear, GradientsMatchFiniteDifferences) {
  Linear layer("fc", 5, 3);
  CheckLayerGradients(layer, RandomVector(4 * 5, 3), 4, 1e-3);
}

TEST(Relu, GradientsMatchFiniteDifferences) {
  Relu layer(6);
  // Keep inputs away from the kink at 0, where the derivative is undefined.
  std::vector<float> x = RandomVector(3 * 6, 5);
  for (float& v : x) v = v < 0 ? v - 0.1f : v + 0.1f;
  CheckLayerGradients(layer, x, 3, 1e-3);
}

TEST(Conv2d, GradientsMatchFiniteDifferences) {
  // 2 images of 5x4 pixels, 2 channels, 3 output channels, 3x3 kernel: outputs 3x2.
  Conv2d layer("conv", 5, 4, 2, 3, 3);
  CheckLayerGradients(layer, RandomVector(2 * 5 * 4 * 2, 31), 2, 1e-3);
}

TEST(MaxPool2d, GradientsMatchFiniteDifferences) {
  MaxPool2d layer(4, 6, 2, 2);
  // Distinct values at least 0.05 apart: a perturbation of 0.01 never changes a window's maximum.
  const int n = 2 * 4 * 6 * 2;
  Rng rng(8);
  std::vector<int32_t> order = Permutation(n, rng);
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = 0.05f * order[i] - 1.0f;
  CheckLayerGradients(layer, x, 2, 1e-3);
}

TEST(Conv2d, ForwardMatchesDirectConvolution) {
  CpuDevice dev;
  const int h = 6, w = 5, c = 2, oc = 3, k = 3, batch = 2;
  Conv2d layer("conv", h, w, c, oc, k);
  ASSERT_TRUE(layer.Prepare(dev, batch).ok());
  std::vector<float> params(k * k * c * oc + oc);
  Rng rng(4);
  layer.InitParams(rng, params.data());
  const std::vector<float> x = RandomVector(batch * h * w * c, 12);
  std::vector<float> y(batch * layer.output_size());
  ASSERT_TRUE(layer.Forward(dev, {params.data(), x.data(), batch, y.data()}).ok());
  const int oh_n = h - k + 1, ow_n = w - k + 1;
  for (int n = 0; n < batch; ++n) {
    for (int oh = 0; oh < oh_n; ++oh) {
      for (int ow = 0; ow < ow_n; ++ow) {
        for (int o = 0; o < oc; ++o) {
          double sum = params[k * k * c * oc + o];
          for (int kh = 0; kh < k; ++kh) {
            for (int kw = 0; kw < k; ++kw) {
              for (int ci = 0; ci < c; ++ci) {
                sum += static_cast<double>(x[((n * h + oh + kh) * w + ow + kw) * c + ci]) *
                       params[((kh * k + kw) * c + ci) * oc + o];
              }
            }
          }
          EXPECT_NEAR(y[((n * oh_n + oh) * ow_n + ow) * oc + o], sum, 1e-5);
        }
      }
    }
  }
}

TEST(Im2Col, Col2ImIsItsAdjoint) {
  // <Im2Col(x), c> == <x, Col2Im(c)> for any x and c.
  CpuDevice dev;
  const int batch = 2, h = 7, w = 6, ch = 3, k = 4;
  const int rows = batch * (h - k + 1) * (w - k + 1);
  const std::vector<float> x = RandomVector(batch * h * w * ch, 1);
  const std::vector<float> c = RandomVector(rows * k * k * ch, 2);
  std::vector<float> cols(c.size()), back(x.size());
  ASSERT_TRUE(dev.Im2Col(batch, h, w, ch, k, x.data(), cols.data()).ok());
  ASSERT_TRUE(dev.Col2Im(batch, h, w, ch, k, c.data(), back.data()).ok());
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < c.size(); ++i) lhs += static_cast<double>(cols[i]) * c[i];
  for (size_t i = 0; i < x.size(); ++i) rhs += static_cast<double>(x[i]) * back[i];
  EXPECT_NEAR(lhs, rhs, 1e-6 * std::abs(lhs));
}

TEST(MaxPool2d, PicksTheWindowMaximum) {
  CpuDevice dev;
  // One 2x4 single-channel image: windows {1, 5, 2, 0} and {3, -1, 7, 4}.
  const std::vector<float> x = {1, 5, 3, -1, 2, 0, 7, 4};
  std::vector<float> y(2);
  std::vector<int32_t> argmax(2);
  ASSERT_TRUE(dev.MaxPoolForward(1, 2, 4, 1, 2, x.data(), y.data(), argmax.data()).ok());
  EXPECT_EQ(y, (std::vector<float>{5, 7}));
  EXPECT_EQ(argmax, (std::vector<int32_t>{1, 6}));
  EXPECT_EQ(dev.MaxPoolForward(1, 3, 4, 1, 2, x.data(), y.data(), argmax.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Cnn, WholeModelGradientMatchesFiniteDifferences) {
  CpuDevice dev;
  const int batch = 2;
  auto model = MakeCnn(ImageShape{16, 16, 1}, {8}, 3, dev, batch);
  ASSERT_TRUE(model.ok()) << model.status();
  const int64_t n = (*model)->layout().total();
  std::vector<float> params(n);
  (*model)->InitParams(5, params.data());
  const std::vector<float> x = RandomVector(batch * 256, 44);
  const std::vector<int32_t> labels = {2, 0};
  // A strided sample of every tensor; the check is deterministic (fixed seeds).
  const auto pairs = WholeModelGradients(**model, params, x, labels, 1e-3f, 37);
  const int checked = static_cast<int>(pairs.size());
  int disagreeing = 0;
  for (const GradientPair& g : pairs) {
    // A perturbation can cross a ReLU or max-pool kink; allow a handful of such parameters.
    if (std::abs(g.analytic - g.numeric) > 1e-3 + 0.05 * std::abs(g.numeric)) ++disagreeing;
  }
  EXPECT_GT(checked, 500);
  EXPECT_LE(disagreeing, checked / 100) << disagreeing << " of " << checked;
}

TEST(Linear, ForwardComputesXWPlusB) {
  CpuDevice dev;
  Linear layer("fc", 2, 2);
  // W = [[1, 2], [3, 4]] (in, out), b = [10, 20].
  const std::vector<float> params = {1, 2, 3, 4, 10, 20};
  const std::vector<float> x = {1, 1, 2, -1};
  std::vector<float> y(4);
  ASSERT_TRUE(layer.Forward(dev, {params.data(), x.data(), 2, y.data()}).ok());
  EXPECT_EQ(y, (std::vector<float>{14, 26, 9, 20}));
}

TEST(SoftmaxCrossEntropy, LossAndGradientMatchFiniteDifferences) {
  CpuDevice dev;
  const int rows = 3;
  const int classes = 4;
  std::vector<float> logits = RandomVector(rows * classes, 9, -2.0f, 2.0f);
  const std::vector<int32_t> labels = {0, 3, 2};
  std::vector<float> probs(rows * classes), loss(rows), correct(rows), dlogits(rows * classes);
  auto total_loss = [&](const std::vector<float>& z) {
    EXPECT_TRUE(dev.SoftmaxCrossEntropy(rows, classes, z.data(), labels.data(), probs.data(),
                                        loss.data(), correct.data())
                    .ok());
    double s = 0.0;
    for (float l : loss) s += l;
    return s;
  };
  total_loss(logits);
  // Row 0: loss = -log softmax(z)[0], computed here in double.
  double denom = 0.0;
  for (int j = 0; j < classes; ++j) denom += std::exp(static_cast<double>(logits[j]));
  EXPECT_NEAR(loss[0], -(logits[0] - std::log(denom)), 1e-5);
  ASSERT_TRUE(dev.SoftmaxCrossEntropyBackward(rows, classes, probs.data(), labels.data(), 1.0f,
                                              dlogits.data())
                  .ok());
  const float h = 1e-2f;
  for (size_t i = 0; i < logits.size(); ++i) {
    std::vector<float> z = logits;
    z[i] += h;
    const double up = total_loss(z);
    z[i] -= 2 * h;
    const double down = total_loss(z);
    EXPECT_NEAR(dlogits[i], (up - down) / (2 * h), 1e-3) << "logit " << i;
  }
}

TEST(SoftmaxCrossEntropy, RejectsLabelOutOfRange) {
  CpuDevice dev;
  std::vector<float> z(4), p(4), loss(1), correct(1);
  const int32_t label = 4;
  EXPECT_EQ(
      dev.SoftmaxCrossEntropy(1, 4, z.data(), &label, p.data(), loss.data(), correct.data()).code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(Mlp, WholeModelGradientMatchesFiniteDifferences) {
  CpuDevice dev;
  const int batch = 4;
  auto model = MakeMlp(6, {5, 4}, 3, dev, batch);
  ASSERT_TRUE(model.ok()) << model.status();
  const int64_t n = (*model)->layout().total();
  std::vector<float> params(n);
  (*model)->InitParams(3, params.data());
  // Finite differences are meaningless across a ReLU kink: pick inputs whose hidden
  // pre-activations all stay clear of zero under the perturbations below.
  auto min_abs_preactivation = [&](const std::vector<float>& in) {
    Linear fc1("fc1", 6, 5), fc2("fc2", 5, 4);
    std::vector<float> z1(batch * 5), z2(batch * 4);
    EXPECT_TRUE(fc1.Forward(dev, {params.data(), in.data(), batch, z1.data()}).ok());
    for (float& v : z1) v = std::max(v, 0.0f);
    EXPECT_TRUE(fc2.Forward(dev, {params.data() + 35, z1.data(), batch, z2.data()}).ok());
    float m = 1e9f;
    for (float v : z2) m = std::min(m, std::abs(v));
    fc1.Forward(dev, {params.data(), in.data(), batch, z1.data()}).IgnoreError();
    for (float v : z1) m = std::min(m, std::abs(v));
    return m;
  };
  std::vector<float> x;
  for (uint64_t seed = 21;; ++seed) {
    x = RandomVector(batch * 6, seed);
    if (min_abs_preactivation(x) > 0.05f) break;
    ASSERT_LT(seed, 1000u) << "no kink-free input found";
  }
  const std::vector<int32_t> labels = {0, 2, 1, 2};
  for (const GradientPair& g : WholeModelGradients(**model, params, x, labels, 2e-3f, 1)) {
    EXPECT_NEAR(g.analytic, g.numeric, 1e-3) << "param " << g.index;
  }
}

TEST(Mlp, GradScaleScalesAndAccumulates) {
  CpuDevice dev;
  auto model = MakeMlp(3, {4}, 2, dev, 2);
  ASSERT_TRUE(model.ok());
  const int64_t n = (*model)->layout().total();
  std::vector<float> params(n);
  (*model)->InitParams(1, params.data());
  const std::vector<float> x = {0.1f, -0.2f, 0.3f, 0.5f, 0.5f, -0.5f};
  const std::vector<int32_t> labels = {1, 0};
  std::vector<float> once(n, 0.0f), twice_half(n, 0.0f);
  ASSERT_TRUE(
      (*model)->ForwardBackward(params.data(), x.data(), labels.data(), 2, 1.0f, once.data()).ok());
  for (int k = 0; k < 2; ++k) {
    ASSERT_TRUE(
        (*model)
            ->ForwardBackward(params.data(), x.data(), labels.data(), 2, 0.5f, twice_half.data())
            .ok());
  }
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(twice_half[i], once[i], 1e-6) << i;
}

// The first micro-batch overwrites the gradient buffer: whatever it held (NaN here) is gone, and
// the result is bit for bit the accumulation into zeros. Both models: the CNN's convolution and
// pooling write their gradients the same way.
TEST(Model, OverwritingGradientsEqualsAccumulatingIntoZeros) {
  CpuDevice dev;
  for (const char* name : {"mlp", "cnn"}) {
    auto model =
        MakeModel(ModelSpec{name, {6}}, SampleShape{16 * 16, 3, ImageShape{16, 16, 1}}, dev, 4);
    ASSERT_TRUE(model.ok()) << model.status();
    const int64_t n = (*model)->layout().total();
    std::vector<float> params(n);
    (*model)->InitParams(3, params.data());
    Rng rng(5);
    std::vector<float> x(4 * 256);
    for (float& v : x) v = rng.Uniform(-1.0f, 1.0f);
    const std::vector<int32_t> labels = {0, 2, 1, 2};
    std::vector<float> zeroed(n, 0.0f), overwritten(n, std::nanf(""));
    ASSERT_TRUE(
        (*model)
            ->ForwardBackward(params.data(), x.data(), labels.data(), 4, 0.5f, zeroed.data())
            .ok());
    ASSERT_TRUE((*model)
                    ->ForwardBackward(params.data(), x.data(), labels.data(), 4, 0.5f,
                                      overwritten.data(), {}, /*overwrite_grads=*/true)
                    .ok());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(overwritten[i], zeroed[i]) << name << " " << i;
  }
}

TEST(Model, RejectsMismatchedLayerSizes) {
  CpuDevice dev;
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<Linear>("a", 4, 3));
  layers.push_back(std::make_unique<Linear>("b", 2, 2));
  EXPECT_EQ(Model::Create("bad", std::move(layers), dev, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status unknown =
      MakeModel(ModelSpec{"resnet", {}}, SampleShape{4, 2, ImageShape{2, 2, 1}}, dev, 8).status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(unknown.message(), "mlp|cnn")) << unknown;
}

// Every registered model builds by name for a data set's sample shape, with its default widths.
TEST(ModelRegistry, BuildsEveryRegisteredModelByName) {
  CpuDevice dev;
  EXPECT_EQ(ModelNames(), "mlp|cnn|dlrm|gpt");  // dlrm and gpt: dlrm_test, gpt_test
  const SampleShape images{28 * 28, 10, ImageShape{28, 28, 1}};
  auto mlp = MakeModel(ModelSpec{"mlp", {}}, images, dev, 4);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  EXPECT_EQ((*mlp)->layout().total(), 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  auto cnn = MakeModel(ModelSpec{"cnn", {}}, images, dev, 4);
  ASSERT_TRUE(cnn.ok()) << cnn.status();
  EXPECT_EQ((*cnn)->name(), "cnn");
  EXPECT_EQ((*cnn)->num_classes(), 10);
}

}  // namespace
}  // namespace ps
