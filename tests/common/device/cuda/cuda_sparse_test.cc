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
#include "tests/common/device/sparse_op_cases.h"

namespace ps {
namespace {

TEST_F(CudaParity, EmbeddingConcatForwardAndBackward) {
  const EmbeddingConcatCase c = MakeEmbeddingConcatCase();
  float* gy = Up(std::vector<float>(c.out_size()));
  float* gdx = Up(std::vector<float>(c.x.size()));
  float* ggrads = Up(std::vector<float>(c.rows.size(), 9.0f));  // overwritten
  ASSERT_TRUE(gpu_->EmbeddingConcatForward(c.batch, c.width, Up(c.x), c.fields, c.dim, Up(c.rows),
                                           Up(c.sparse.lookups), gy)
                  .ok());
  ASSERT_TRUE(gpu_->EmbeddingConcatBackward(c.batch, c.width, Up(c.dy), c.fields, c.dim, c.unique,
                                            Up(c.sparse.offsets), Up(c.sparse.positions), gdx,
                                            ggrads)
                  .ok());
  EXPECT_EQ(Down(gy, c.y.size()), c.y);
  EXPECT_EQ(Down(gdx, c.dx.size()), c.dx);
  EXPECT_EQ(Down(ggrads, c.row_grads.size()), c.row_grads);
}

TEST_F(CudaParity, DotInteractionForwardAndBackward) {
  const DotInteractionCase c = MakeDotInteractionCase(19, 27, 16);
  float* gx = Up(c.x);
  float* gy = Up(std::vector<float>(c.y.size()));
  float* gdx = Up(std::vector<float>(c.dx.size()));
  ASSERT_TRUE(gpu_->DotInteractionForward(c.batch, c.n, c.dim, gx, gy).ok());
  ASSERT_TRUE(gpu_->DotInteractionBackward(c.batch, c.n, c.dim, gx, Up(c.dy), gdx).ok());
  ExpectClose(Down(gy, c.y.size()), c.y, 1e-5);
  ExpectClose(Down(gdx, c.dx.size()), c.dx, 1e-5);
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
