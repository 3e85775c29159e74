// DLRM's pieces on the CPU device: key deduplication, finite-difference checks of the sparse
// lookup, the dot interaction, the logistic loss and the whole model (dense weights and rows).

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/match.h"
#include "common/device/cpu_device.h"
#include "common/nn/layers.h"
#include "common/nn/model.h"
#include "common/nn/model_registry.h"
#include "common/nn/sparse_lookup.h"
#include "gtest/gtest.h"
#include "tests/common/base/random_vector.h"
#include "tests/common/nn/finite_difference.h"

namespace ps {
namespace {

// sum(y * r) for a parameter-free layer's forward pass.
double Weighted(Layer& layer, CpuDevice& dev, const std::vector<float>& x, int batch,
                const std::vector<float>& r) {
  return Weighted(layer, dev, nullptr, x, batch, r);
}

TEST(DeduplicateKeys, UniqueKeysInFirstSeenOrderAndLookupsGroupedByRow) {
  const std::vector<uint64_t> keys = {7, 9, 7, 3, 9, 7};
  const SparseLookups s = DeduplicateKeys(keys.data(), keys.size());
  EXPECT_EQ(s.unique_keys, (std::vector<uint64_t>{7, 9, 3}));
  EXPECT_EQ(s.lookups, (std::vector<int32_t>{0, 1, 0, 2, 1, 0}));
  EXPECT_EQ(s.offsets, (std::vector<int32_t>{0, 3, 5, 6}));
  EXPECT_EQ(s.positions, (std::vector<int32_t>{0, 2, 5, 1, 4, 3}));
  const SparseLookups none = DeduplicateKeys(nullptr, 0);
  EXPECT_TRUE(none.unique_keys.empty());
  EXPECT_EQ(none.offsets, (std::vector<int32_t>{0}));
}

TEST(DotInteraction, ForwardIsTheFirstVectorThenPairwiseDots) {
  CpuDevice dev;
  DotInteraction layer(3, 2);
  // Vectors (1, 2), (3, 4), (5, 6): dots <v1,v0> = 11, <v2,v0> = 17, <v2,v1> = 39.
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  std::vector<float> y(layer.output_size());
  ASSERT_TRUE(layer.Forward(dev, {nullptr, x.data(), 1, y.data()}).ok());
  EXPECT_EQ(y, (std::vector<float>{1, 2, 11, 17, 39}));
}

TEST(DotInteraction, GradientMatchesFiniteDifferences) {
  CpuDevice dev;
  const int batch = 3, n = 4, dim = 3;
  DotInteraction layer(n, dim);
  std::vector<float> x = RandomVector(batch * n * dim, 5);
  const std::vector<float> r = RandomVector(batch * layer.output_size(), 6);
  std::vector<float> y(batch * layer.output_size()), dx(x.size());
  ASSERT_TRUE(layer.Forward(dev, {nullptr, x.data(), batch, y.data()}).ok());
  ASSERT_TRUE(
      layer.Backward(dev, {nullptr, x.data(), y.data(), r.data(), batch, dx.data(), nullptr, 0.0f})
          .ok());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(dx[i], Central(x, i, [&] { return Weighted(layer, dev, x, batch, r); }), 1e-3) << i;
  }
}

// The device's loops are arranged for speed; they must sum in the plain loops' order (the CUDA
// kernels' too), so the results are those of the plain loops to the bit. The shapes cover the
// loops' edges: one and several blocks of 16 vectors, groups of rows cut short, and a width
// that is a multiple of 16, one that is not, and one under 16.
TEST(DotInteraction, SumsInThePlainLoopsOrderBitForBit) {
  CpuDevice dev;
  struct Shape {
    int n, dim;
  };
  for (const Shape shape :
       {Shape{27, 16}, Shape{5, 3}, Shape{20, 20}, Shape{34, 8}, Shape{2, 32}}) {
    const int batch = 5, n = shape.n, dim = shape.dim;
    SCOPED_TRACE(testing::Message() << "n " << n << " dim " << dim);
    const int64_t width = dim + n * (n - 1) / 2;
    const std::vector<float> x = RandomVector(batch * n * dim, 7);
    const std::vector<float> dy = RandomVector(batch * width, 8);
    std::vector<float> y(batch * width), dx(x.size());
    ASSERT_TRUE(dev.DotInteractionForward(batch, n, dim, x.data(), y.data()).ok());
    ASSERT_TRUE(dev.DotInteractionBackward(batch, n, dim, x.data(), dy.data(), dx.data()).ok());
    for (int b = 0; b < batch; ++b) {
      const float* v = x.data() + b * n * dim;
      const float* g = dy.data() + b * width;
      for (int d = 0; d < dim; ++d) ASSERT_EQ(y[b * width + d], v[d]) << b << " " << d;
      int64_t k = dim;
      for (int i = 1; i < n; ++i) {
        for (int j = 0; j < i; ++j) {
          float dot = 0.0f;
          for (int d = 0; d < dim; ++d) dot += v[i * dim + d] * v[j * dim + d];
          ASSERT_EQ(y[b * width + k++], dot) << b << " " << i << " " << j;
        }
      }
      for (int i = 0; i < n; ++i) {
        for (int d = 0; d < dim; ++d) {
          float sum = i == 0 ? g[d] : 0.0f;
          for (int j = 0; j < n; ++j) {
            if (j == i) continue;
            const int hi = std::max(i, j), lo = std::min(i, j);
            sum += g[dim + hi * (hi - 1) / 2 + lo] * v[j * dim + d];
          }
          ASSERT_EQ(dx[(b * n + i) * dim + d], sum) << b << " " << i << " " << d;
        }
      }
    }
  }
}

TEST(EmbeddingConcat, GradientsOfRowsAndInputMatchFiniteDifferences) {
  CpuDevice dev;
  const int batch = 3, fields = 2, dim = 4, width = 2;
  EmbeddingConcat layer(SparseTableSpec{"t", dim, 0.1f}, width, fields);
  // Row 1 is read three times (twice by sample 2), row 0 twice, row 2 once.
  const std::vector<uint64_t> keys = {10, 11, 12, 10, 11, 11};
  const SparseLookups lookups = DeduplicateKeys(keys.data(), keys.size());
  std::vector<float> rows = RandomVector(3 * dim, 8);
  std::vector<float> row_grads(rows.size(), 123.0f);  // overwritten
  SparseBatch sparse{
      rows.data(),     3, lookups.lookups.data(), lookups.offsets.data(), lookups.positions.data(),
      row_grads.data()};
  std::vector<float> x = RandomVector(batch * width, 9);
  std::vector<float> y(batch * layer.output_size()), dx(x.size());
  EXPECT_EQ(layer.Forward(dev, {nullptr, x.data(), batch, y.data()}).code(),
            absl::StatusCode::kFailedPrecondition);
  layer.BindSparse(&sparse);
  ASSERT_TRUE(layer.Forward(dev, {nullptr, x.data(), batch, y.data()}).ok());
  // Sample 1 = [x1 | row of key 12 | row of key 10].
  for (int d = 0; d < dim; ++d) {
    EXPECT_EQ(y[1 * 10 + width + d], rows[2 * dim + d]);
    EXPECT_EQ(y[1 * 10 + width + dim + d], rows[0 * dim + d]);
  }
  const std::vector<float> r = RandomVector(y.size(), 10);
  ASSERT_TRUE(
      layer.Backward(dev, {nullptr, x.data(), y.data(), r.data(), batch, dx.data(), nullptr, 0.0f})
          .ok());
  auto objective = [&] { return Weighted(layer, dev, x, batch, r); };
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_NEAR(row_grads[i], Central(rows, i, objective), 1e-3) << "row element " << i;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(dx[i], Central(x, i, objective), 1e-3) << "input " << i;
  }
}

TEST(LogisticLoss, ValuesGradientAndLabels) {
  CpuDevice dev;
  std::vector<float> z = {0.0f, 2.0f, -3.0f, 100.0f};
  const std::vector<int32_t> labels = {1, 1, 1, 0};
  std::vector<float> p(4), loss(4), correct(4), dz(4);
  auto total = [&] {
    EXPECT_TRUE(
        dev.LogisticLoss(4, z.data(), labels.data(), p.data(), loss.data(), correct.data()).ok());
    return static_cast<double>(loss[0]) + loss[1] + loss[2] + loss[3];
  };
  total();
  EXPECT_FLOAT_EQ(p[0], 0.5f);
  EXPECT_NEAR(loss[0], std::log(2.0), 1e-7);
  EXPECT_NEAR(loss[1], std::log1p(std::exp(-2.0)), 1e-7);
  EXPECT_NEAR(loss[2], 3.0 + std::log1p(std::exp(-3.0)), 1e-6);
  EXPECT_FLOAT_EQ(loss[3], 100.0f);  // finite where exp(100) would overflow a float
  EXPECT_EQ(correct, (std::vector<float>{0, 1, 0, 0}));
  ASSERT_TRUE(dev.LogisticLossBackward(4, p.data(), labels.data(), 1.0f, dz.data()).ok());
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(dz[i], Central(z, i, total), 1e-3) << i;
  const int32_t two = 2;
  EXPECT_EQ(dev.LogisticLoss(1, z.data(), &two, p.data(), loss.data(), correct.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(dev.LogisticLossBackward(1, p.data(), &two, 1.0f, dz.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

// The whole model on 4 samples of 3 dense features and 2 keys (rows of width 3): every dense
// weight and every pulled row against central differences of the mean loss.
TEST(Dlrm, WholeModelGradientsMatchFiniteDifferences) {
  CpuDevice dev;
  const int batch = 4, dense = 3, fields = 2, dim = 3;
  auto made = MakeDlrm(dense, fields, dim, /*bottom=*/{}, /*top=*/{}, dev, batch);
  ASSERT_TRUE(made.ok()) << made.status();
  Model& model = **made;
  ASSERT_EQ(model.description().sparse().size(), 1u);
  EXPECT_EQ(model.description().sparse()[0].name, "embeddings");
  EXPECT_EQ(model.description().sparse()[0].dim, dim);
  EXPECT_NE(model.description().fingerprint(), model.layout().fingerprint());
  std::vector<float> params(model.layout().total());
  model.InitParams(4, params.data());
  const std::vector<uint64_t> keys = {1, 2, 1, 3, 4, 2, 1, 1};
  const SparseLookups lookups = DeduplicateKeys(keys.data(), keys.size());
  const int64_t unique = static_cast<int64_t>(lookups.unique_keys.size());
  std::vector<float> rows = RandomVector(unique * dim, 12, -0.5f, 0.5f);
  std::vector<float> row_grads(rows.size());
  SparseBatch sparse{rows.data(),
                     unique,
                     lookups.lookups.data(),
                     lookups.offsets.data(),
                     lookups.positions.data(),
                     row_grads.data()};
  model.BindSparse(&sparse);
  const std::vector<int32_t> labels = {1, 0, 0, 1};
  // The only ReLU follows bottom1 (x W + b, W first in the layout): pick inputs whose
  // pre-activations stay clear of its kink under the perturbations.
  std::vector<float> x;
  for (uint64_t seed = 30;; ++seed) {
    x = RandomVector(batch * dense, seed);
    float closest = 1e9f;
    for (int b = 0; b < batch; ++b) {
      for (int j = 0; j < dim; ++j) {
        float z = params[dense * dim + j];
        for (int i = 0; i < dense; ++i) z += x[b * dense + i] * params[i * dim + j];
        closest = std::min(closest, std::abs(z));
      }
    }
    if (closest > 0.1f) break;
    ASSERT_LT(seed, 2000u) << "no kink-free input found";
  }
  std::vector<float> grads(params.size());
  auto stats =
      model.ForwardBackward(params.data(), x.data(), labels.data(), batch, 1.0f, grads.data(), {},
                            /*overwrite_grads=*/true);
  ASSERT_TRUE(stats.ok()) << stats.status();
  const std::vector<float> analytic_rows = row_grads;
  auto mean_loss = [&] {
    auto s = model.Evaluate(params.data(), x.data(), labels.data(), batch);
    EXPECT_TRUE(s.ok());
    return s->loss_sum / batch;
  };
  EXPECT_NEAR(stats->loss_sum / batch, mean_loss(), 1e-6);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_NEAR(grads[i], Central(params, i, mean_loss), 2e-3) << "param " << i;
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_NEAR(analytic_rows[i], Central(rows, i, mean_loss), 2e-3) << "row element " << i;
  }
  // Probabilities of the last pass: one per sample, in (0, 1).
  for (int b = 0; b < batch; ++b) {
    EXPECT_GT(model.probabilities()[b], 0.0f);
    EXPECT_LT(model.probabilities()[b], 1.0f);
  }
  model.BindSparse(nullptr);
  EXPECT_EQ(model.Evaluate(params.data(), x.data(), labels.data(), batch).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(Dlrm, BuildsByNameForClickDataOnly) {
  CpuDevice dev;
  const SampleShape clicks{13, 2, ImageShape{}, 26};
  auto dlrm = MakeModel(ModelSpec{"dlrm", {}, 16}, clicks, dev, 4);
  ASSERT_TRUE(dlrm.ok()) << dlrm.status();
  EXPECT_EQ((*dlrm)->loss(), Loss::kLogistic);
  EXPECT_EQ((*dlrm)->num_classes(), 1);
  // bottom 13 -> 64 -> 16; 27 vectors -> 16 + 351 -> top 64 -> 1.
  EXPECT_EQ((*dlrm)->layout().total(),
            13 * 64 + 64 + 64 * 16 + 16 + (16 + 351) * 64 + 64 + 64 * 1 + 1);
  const absl::Status images =
      MakeModel(ModelSpec{"dlrm", {}, 16}, SampleShape{784, 10, ImageShape{28, 28, 1}}, dev, 4)
          .status();
  EXPECT_EQ(images.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(images.message(), "criteo")) << images;
  EXPECT_EQ(MakeModel(ModelSpec{"dlrm", {}, 0}, clicks, dev, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Model, TheLogisticLossTakesOneLogit) {
  CpuDevice dev;
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<Linear>("fc1", 3, 2));
  EXPECT_EQ(Model::Create("two", std::move(layers), dev, 4, Loss::kLogistic).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
