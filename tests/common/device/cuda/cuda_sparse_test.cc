// CPU/CUDA parity of DLRM's ops and of a whole DLRM training step (dense gradients and the
// pulled rows' gradients). Skips when no GPU is visible. Tolerances:
// - exact: the sparse lookup and its row gradients (copies and plain sums in one fixed order);
// - 1e-5 relative to the largest output: the dot interaction (the GPU may fuse multiply-adds);
// - 1e-5 absolute: the logistic loss (other libm);
// - the training step: loss to 1e-5 relative, gradients to 1e-3 of the largest one.

#include <vector>

#include "common/nn/model_registry.h"
#include "common/nn/sparse_lookup.h"
#include "tests/common/base/random_vector.h"
#include "tests/common/device/cuda/cuda_parity.h"

namespace ps {
namespace {

TEST_F(CudaParity, EmbeddingConcatForwardAndBackward) {
  const int batch = 37, width = 5, fields = 4, dim = 6;
  std::vector<uint64_t> keys(batch * fields);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = (i * 7919) % 23;  // repeats
  const SparseLookups s = DeduplicateKeys(keys.data(), keys.size());
  const int64_t unique = static_cast<int64_t>(s.unique_keys.size());
  const auto rows = RandomVector(unique * dim, 3);
  const auto x = RandomVector(batch * width, 4);
  const int64_t out = int64_t{batch} * (width + fields * dim);
  const auto dy = RandomVector(out, 5);
  std::vector<float> y(out), dx(x.size()), grads(rows.size());
  ASSERT_TRUE(cpu_.EmbeddingConcatForward(batch, width, x.data(), fields, dim, rows.data(),
                                          s.lookups.data(), y.data())
                  .ok());
  ASSERT_TRUE(cpu_.EmbeddingConcatBackward(batch, width, dy.data(), fields, dim, unique,
                                           s.offsets.data(), s.positions.data(), dx.data(),
                                           grads.data())
                  .ok());
  float* gy = Up(std::vector<float>(out));
  float* gdx = Up(std::vector<float>(x.size()));
  float* ggrads = Up(std::vector<float>(rows.size(), 9.0f));  // overwritten
  ASSERT_TRUE(
      gpu_->EmbeddingConcatForward(batch, width, Up(x), fields, dim, Up(rows), Up(s.lookups), gy)
          .ok());
  ASSERT_TRUE(gpu_->EmbeddingConcatBackward(batch, width, Up(dy), fields, dim, unique,
                                            Up(s.offsets), Up(s.positions), gdx, ggrads)
                  .ok());
  EXPECT_EQ(Down(gy, out), y);
  EXPECT_EQ(Down(gdx, dx.size()), dx);
  EXPECT_EQ(Down(ggrads, grads.size()), grads);
}

TEST_F(CudaParity, DotInteractionForwardAndBackward) {
  const int batch = 19, n = 27, dim = 16;
  const auto x = RandomVector(int64_t{batch} * n * dim, 6);
  const int64_t out = int64_t{batch} * (dim + n * (n - 1) / 2);
  const auto dy = RandomVector(out, 7);
  std::vector<float> y(out), dx(x.size());
  ASSERT_TRUE(cpu_.DotInteractionForward(batch, n, dim, x.data(), y.data()).ok());
  ASSERT_TRUE(cpu_.DotInteractionBackward(batch, n, dim, x.data(), dy.data(), dx.data()).ok());
  float* gx = Up(x);
  float* gy = Up(std::vector<float>(out));
  float* gdx = Up(std::vector<float>(x.size()));
  ASSERT_TRUE(gpu_->DotInteractionForward(batch, n, dim, gx, gy).ok());
  ASSERT_TRUE(gpu_->DotInteractionBackward(batch, n, dim, gx, Up(dy), gdx).ok());
  ExpectClose(Down(gy, out), y, 1e-5);
  ExpectClose(Down(gdx, dx.size()), dx, 1e-5);
}

TEST_F(CudaParity, LogisticLossForwardAndBackward) {
  const int rows = 90;
  const auto z = RandomVector(rows, 8, -30.0f, 30.0f);
  std::vector<int32_t> labels(rows);
  for (int r = 0; r < rows; ++r) labels[r] = r % 3 == 0;
  std::vector<float> p(rows), loss(rows), correct(rows), dz(rows);
  ASSERT_TRUE(
      cpu_.LogisticLoss(rows, z.data(), labels.data(), p.data(), loss.data(), correct.data()).ok());
  ASSERT_TRUE(cpu_.LogisticLossBackward(rows, p.data(), labels.data(), 0.5f, dz.data()).ok());
  float* gp = Up(p);
  float* gl = Up(loss);
  float* gc = Up(correct);
  float* gd = Up(dz);
  const int32_t* glabels = Up(labels);
  ASSERT_TRUE(gpu_->LogisticLoss(rows, Up(z), glabels, gp, gl, gc).ok());
  ASSERT_TRUE(gpu_->LogisticLossBackward(rows, gp, glabels, 0.5f, gd).ok());
  ExpectClose(Down(gp, rows), p, 0.0, 1e-5);
  ExpectClose(Down(gl, rows), loss, 0.0, 1e-5);
  EXPECT_EQ(Down(gc, rows), correct);
  ExpectClose(Down(gd, rows), dz, 0.0, 1e-5);
  labels[4] = 2;  // reported by the next wait, as the softmax's
  ASSERT_TRUE(gpu_->LogisticLoss(rows, Up(z), Up(labels), gp, gl, gc).ok());
  EXPECT_EQ(gpu_->Synchronize().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

TEST_F(CudaParity, DlrmTrainingStep) {
  const int batch = 32;
  const SampleShape clicks{13, 2, ImageShape{}, 26};
  auto cpu_model = MakeModel(ModelSpec{"dlrm", {}, 16}, clicks, cpu_, batch);
  auto gpu_model = MakeModel(ModelSpec{"dlrm", {}, 16}, clicks, *gpu_, batch);
  ASSERT_TRUE(cpu_model.ok() && gpu_model.ok());
  const int64_t n = (*cpu_model)->layout().total();
  std::vector<float> params(n);
  (*cpu_model)->InitParams(3, params.data());
  const auto x = RandomVector(batch * 13, 12, 0.0f, 3.0f);
  std::vector<int32_t> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = i % 4 == 0;
  std::vector<uint64_t> keys(batch * 26);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = (i % 26) * 1000 + (i * 31) % 7;
  const SparseLookups s = DeduplicateKeys(keys.data(), keys.size());
  const int64_t unique = static_cast<int64_t>(s.unique_keys.size());
  const auto rows = RandomVector(unique * 16, 13, -0.05f, 0.05f);
  std::vector<float> row_grads(rows.size()), grads(n);
  SparseBatch on_cpu{rows.data(),        unique,          s.lookups.data(), s.offsets.data(),
                     s.positions.data(), row_grads.data()};
  (*cpu_model)->BindSparse(&on_cpu);
  auto want = (*cpu_model)
                  ->ForwardBackward(params.data(), x.data(), labels.data(), batch, 1.0f,
                                    grads.data(), {}, true);
  ASSERT_TRUE(want.ok()) << want.status();
  float* grow_grads = Up(std::vector<float>(rows.size()));
  SparseBatch on_gpu{Up(rows), unique, Up(s.lookups), Up(s.offsets), Up(s.positions), grow_grads};
  (*gpu_model)->BindSparse(&on_gpu);
  float* ggrads = Up(std::vector<float>(n));
  auto got =
      (*gpu_model)->ForwardBackward(Up(params), Up(x), Up(labels), batch, 1.0f, ggrads, {}, true);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_NEAR(got->loss_sum, want->loss_sum, 1e-5 * want->loss_sum);
  ExpectClose(Down(ggrads, n), grads, 1e-3);
  ExpectClose(Down(grow_grads, rows.size()), row_grads, 1e-3);
}

}  // namespace
}  // namespace ps
