// CPU/CUDA parity: every op of CudaDevice, and one whole training step of the MLP and the CNN,
// against CpuDevice from the same inputs. Skips when no GPU is visible. Tolerances, per op:
// - exact (0): Fill, ReLU, Im2Col, max pooling (pure data movement and comparisons), Col2Im
//   (plain additions in the CPU's order, element_kernels.h);
// - 1e-5 absolute: bias add, softmax cross-entropy (same float/double arithmetic, other libm);
// - 1e-4 relative to the largest output: GEMM, column sums, Sum (other summation orders,
//   and cuBLAS may use other kernels);
// - whole training step (also StepGradient with overlapped copies): loss to 1e-5 relative,
//   gradients to 1e-3 of the largest gradient;
// - async copies: exact.

#include "common/device/cuda/cuda_device.h"

#include <cmath>
#include <vector>

#include "common/base/random.h"
#include "common/device/cpu_device.h"
#include "common/nn/model.h"
#include "common/nn/model_registry.h"
#include "common/shm/shared_memory.h"
#include "gtest/gtest.h"
#include "tests/common/base/random_vector.h"
#include "tests/common/device/cuda/cuda_parity.h"
#include "worker/step_gradient.h"

namespace ps {
namespace {

TEST_F(CudaParity, GemmAllTransposes) {
  const int m = 33, n = 17, k = 65;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const auto a = RandomVector(m * k, 1), b = RandomVector(k * n, 2),
                 c0 = RandomVector(m * n, 3);
      std::vector<float> want = c0;
      ASSERT_TRUE(cpu_.Gemm(ta, tb, m, n, k, 0.5f, a.data(), b.data(), 0.25f, want.data()).ok());
      float* c = Up(c0);
      ASSERT_TRUE(gpu_->Gemm(ta, tb, m, n, k, 0.5f, Up(a), Up(b), 0.25f, c).ok());
      ExpectClose(Down(c, m * n), want, 1e-4);
    }
  }
}

TEST_F(CudaParity, ElementwiseOps) {
  const int rows = 37, cols = 29;
  const auto x = RandomVector(rows * cols, 4), bias = RandomVector(cols, 5);
  std::vector<float> want = x;
  ASSERT_TRUE(cpu_.AddBias(rows, cols, bias.data(), want.data()).ok());
  float* gx = Up(x);
  ASSERT_TRUE(gpu_->AddBias(rows, cols, Up(bias), gx).ok());
  ExpectClose(Down(gx, x.size()), want, 0.0, 1e-5);

  std::vector<float> out_cpu = RandomVector(cols, 6);
  float* out_gpu = Up(out_cpu);
  ASSERT_TRUE(cpu_.SumRows(rows, cols, x.data(), 0.5f, out_cpu.data()).ok());
  ASSERT_TRUE(gpu_->SumRows(rows, cols, Up(x), 0.5f, out_gpu).ok());
  ExpectClose(Down(out_gpu, cols), out_cpu, 1e-4);

  std::vector<float> y(x.size()), dx(x.size());
  const auto dy = RandomVector(x.size(), 7);
  ASSERT_TRUE(cpu_.ReluForward(x.size(), x.data(), y.data()).ok());
  ASSERT_TRUE(cpu_.ReluBackward(x.size(), y.data(), dy.data(), dx.data()).ok());
  float* gy = Up(std::vector<float>(x.size()));
  float* gdx = Up(std::vector<float>(x.size()));
  ASSERT_TRUE(gpu_->ReluForward(x.size(), Up(x), gy).ok());
  ASSERT_TRUE(gpu_->ReluBackward(x.size(), gy, Up(dy), gdx).ok());
  EXPECT_EQ(Down(gy, x.size()), y);
  EXPECT_EQ(Down(gdx, x.size()), dx);

  float* filled = Up(std::vector<float>(1000));
  ASSERT_TRUE(gpu_->Fill(2.5f, 1000, filled).ok());
  EXPECT_EQ(Down(filled, 1000), std::vector<float>(1000, 2.5f));
  auto sum = gpu_->Sum(x.size(), Up(x));
  ASSERT_TRUE(sum.ok());
  EXPECT_NEAR(*sum, *cpu_.Sum(x.size(), x.data()), 1e-4);
}

TEST_F(CudaParity, SoftmaxCrossEntropyForwardAndBackward) {
  const int rows = 70, classes = 10;
  const auto logits = RandomVector(rows * classes, 8, -5.0f, 5.0f);
  std::vector<int32_t> labels(rows);
  for (int r = 0; r < rows; ++r) labels[r] = (r * 7) % classes;
  std::vector<float> probs(rows * classes), loss(rows), correct(rows), dlogits(rows * classes);
  ASSERT_TRUE(cpu_.SoftmaxCrossEntropy(rows, classes, logits.data(), labels.data(), probs.data(),
                                       loss.data(), correct.data())
                  .ok());
  ASSERT_TRUE(cpu_.SoftmaxCrossEntropyBackward(rows, classes, probs.data(), labels.data(), 0.1f,
                                               dlogits.data())
                  .ok());
  float* gp = Up(probs);
  float* gl = Up(loss);
  float* gc = Up(correct);
  float* gd = Up(dlogits);
  const int32_t* glabels = Up(labels);
  ASSERT_TRUE(gpu_->SoftmaxCrossEntropy(rows, classes, Up(logits), glabels, gp, gl, gc).ok());
  ASSERT_TRUE(gpu_->SoftmaxCrossEntropyBackward(rows, classes, gp, glabels, 0.1f, gd).ok());
  ExpectClose(Down(gp, probs.size()), probs, 0.0, 1e-5);
  ExpectClose(Down(gl, rows), loss, 0.0, 1e-5);
  EXPECT_EQ(Down(gc, rows), correct);
  ExpectClose(Down(gd, dlogits.size()), dlogits, 0.0, 1e-5);
  // Out of range: INVALID_ARGUMENT as on the CPU, from the next call that waits for the ops
  // (the kernels run ahead of the host), once; then the device works on.
  labels[3] = classes;
  ASSERT_TRUE(gpu_->SoftmaxCrossEntropy(rows, classes, Up(logits), Up(labels), gp, gl, gc).ok());
  EXPECT_EQ(gpu_->Synchronize().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(gpu_->Synchronize().ok());
  ASSERT_TRUE(gpu_->SoftmaxCrossEntropyBackward(rows, classes, gp, Up(labels), 0.1f, gd).ok());
  EXPECT_EQ(gpu_->Sum(rows, gl).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(gpu_->SoftmaxCrossEntropy(rows, classes, Up(logits), glabels, gp, gl, gc).ok());
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

TEST_F(CudaParity, Im2ColCol2ImAndMaxPool) {
  const int batch = 3, h = 12, w = 10, c = 4, k = 5;
  const int rows = batch * (h - k + 1) * (w - k + 1);
  const auto x = RandomVector(batch * h * w * c, 9);
  std::vector<float> cols(rows * k * k * c);
  ASSERT_TRUE(cpu_.Im2Col(batch, h, w, c, k, x.data(), cols.data()).ok());
  float* gcols = Up(std::vector<float>(cols.size()));
  ASSERT_TRUE(gpu_->Im2Col(batch, h, w, c, k, Up(x), gcols).ok());
  EXPECT_EQ(Down(gcols, cols.size()), cols);

  const auto dcols = RandomVector(cols.size(), 10);
  std::vector<float> dx(x.size());
  ASSERT_TRUE(cpu_.Col2Im(batch, h, w, c, k, dcols.data(), dx.data()).ok());
  float* gdx = Up(std::vector<float>(x.size(), 7.0f));  // overwritten, not accumulated
  ASSERT_TRUE(gpu_->Col2Im(batch, h, w, c, k, Up(dcols), gdx).ok());
  EXPECT_EQ(Down(gdx, dx.size()), dx);

  const int pool = 2;
  const size_t y_size = batch * (h / pool) * (w / pool) * c;
  std::vector<float> y(y_size);
  std::vector<int32_t> argmax(y_size);
  ASSERT_TRUE(cpu_.MaxPoolForward(batch, h, w, c, pool, x.data(), y.data(), argmax.data()).ok());
  float* gy = Up(std::vector<float>(y_size));
  int32_t* gargmax = Up(std::vector<int32_t>(y_size));
  ASSERT_TRUE(gpu_->MaxPoolForward(batch, h, w, c, pool, Up(x), gy, gargmax).ok());
  EXPECT_EQ(Down(gy, y_size), y);
  EXPECT_EQ(Down(gargmax, y_size), argmax);
  const auto dy = RandomVector(y_size, 11);
  std::vector<float> dpool(x.size());
  ASSERT_TRUE(cpu_.MaxPoolBackward(y_size, dy.data(), argmax.data(), x.size(), dpool.data()).ok());
  float* gdpool = Up(std::vector<float>(x.size(), 3.0f));
  ASSERT_TRUE(gpu_->MaxPoolBackward(y_size, Up(dy), gargmax, x.size(), gdpool).ok());
  EXPECT_EQ(Down(gdpool, x.size()), dpool);
}

// One training step (forward, backward) of a whole model on both devices.
void CompareTrainingStep(CudaParity* t, CpuDevice& cpu, CudaDevice& gpu, const ModelSpec& spec) {
  const int batch = 16;
  const SampleShape shape{28 * 28, 10, ImageShape{28, 28, 1}};
  auto cpu_model = MakeModel(spec, shape, cpu, batch);
  auto gpu_model = MakeModel(spec, shape, gpu, batch);
  ASSERT_TRUE(cpu_model.ok() && gpu_model.ok());
  const int64_t n = (*cpu_model)->layout().total();
  std::vector<float> params(n);
  (*cpu_model)->InitParams(3, params.data());
  const auto x = RandomVector(batch * shape.features, 12);
  std::vector<int32_t> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = i % 10;
  std::vector<float> grads(n, 0.0f);
  auto want =
      (*cpu_model)
          ->ForwardBackward(params.data(), x.data(), labels.data(), batch, 1.0f, grads.data());
  ASSERT_TRUE(want.ok());
  float* gparams = t->Up(params);
  float* ggrads = t->Up(std::vector<float>(n, 0.0f));
  auto got = (*gpu_model)->ForwardBackward(gparams, t->Up(x), t->Up(labels), batch, 1.0f, ggrads);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_NEAR(got->loss_sum, want->loss_sum, 1e-5 * want->loss_sum);
  EXPECT_EQ(got->correct, want->correct);
  CudaParity::ExpectClose(t->Down(ggrads, n), grads, 1e-3);
}

TEST_F(CudaParity, MlpTrainingStep) {
  CompareTrainingStep(this, cpu_, *gpu_, ModelSpec{"mlp", {}});
}

TEST_F(CudaParity, CnnTrainingStep) {
  CompareTrainingStep(this, cpu_, *gpu_, ModelSpec{"cnn", {}});
}

// The copy stream: data copied in asynchronously is seen by the ops issued after OpsWaitFor,
// and the ops' result copied out is on the host after WaitForCopy, through pinned host memory,
// a registered shared-memory region and pageable memory alike. Tickets end at Synchronize().
TEST_F(CudaParity, AsyncCopiesAreOrderedWithTheOps) {
  const int64_t n = 1 << 20;  // 4 MiB: long enough for the streams to overlap if unordered
  const auto x = RandomVector(n, 13);
  std::vector<float> want(n);
  ASSERT_TRUE(cpu_.ReluForward(n, x.data(), want.data()).ok());
  auto region = SharedMemory::Create(2 * n * sizeof(float));
  ASSERT_TRUE(region.ok()) << region.status();
  auto pinned = gpu_->AllocateHost(2 * n * sizeof(float));
  ASSERT_TRUE(pinned.ok());
  auto registration = gpu_->RegisterHostMemory((*region)->data(), 2 * n * sizeof(float));
  ASSERT_TRUE(registration.ok()) << registration.status();
  std::vector<float> pageable(2 * n);
  float* dev_x = Up(std::vector<float>(n));
  float* dev_y = Up(std::vector<float>(n));
  for (float* host :
       {pinned->as<float>(), reinterpret_cast<float*>((*region)->data()), pageable.data()}) {
    std::copy(x.begin(), x.end(), host);
    std::fill(host + n, host + 2 * n, -1.0f);
    auto in = gpu_->CopyToDeviceAsync(host, n * sizeof(float), dev_x, /*after_ops=*/false);
    ASSERT_TRUE(in.ok()) << in.status();
    ASSERT_TRUE(gpu_->OpsWaitFor(*in).ok());
    ASSERT_TRUE(gpu_->ReluForward(n, dev_x, dev_y).ok());
    auto out = gpu_->CopyToHostAsync(dev_y, n * sizeof(float), host + n);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, *in + 1);
    ASSERT_TRUE(gpu_->WaitForCopy(*out).ok());
    EXPECT_EQ(std::vector<float>(host + n, host + 2 * n), want);
    ASSERT_TRUE(gpu_->Synchronize().ok());
    EXPECT_EQ(gpu_->WaitForCopy(*out).code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(gpu_->OpsWaitFor(-1).code(), absl::StatusCode::kInvalidArgument);
}

// StepGradient's overlapped copies on the GPU against the CPU device's serial step: the same
// gradient and loss within the whole-step tolerances, for the MLP and the CNN, 2 micro-batches.
TEST_F(CudaParity, OverlappedStepGradientMatchesTheCpu) {
  ImageDataset data;
  data.rows = 28;
  data.cols = 28;
  Rng rng(14);
  for (int i = 0; i < 64; ++i) {
    for (int p = 0; p < 28 * 28; ++p) data.pixels.push_back(static_cast<uint8_t>(rng.Below(256)));
    data.labels.push_back(i % 10);
  }
  BatchPlanOptions plan;
  plan.dataset_size = data.size();
  plan.batch_size = 16;
  plan.accumulate = 2;
  for (const char* name : {"mlp", "cnn"}) {
    SCOPED_TRACE(name);
    auto cpu_model =
        MakeModel(ModelSpec{name, {}}, SampleShape{28 * 28, 10, ImageShape{28, 28, 1}}, cpu_, 16);
    auto gpu_model =
        MakeModel(ModelSpec{name, {}}, SampleShape{28 * 28, 10, ImageShape{28, 28, 1}}, *gpu_, 16);
    ASSERT_TRUE(cpu_model.ok() && gpu_model.ok());
    auto cpu_step = StepGradient::Create(**cpu_model, cpu_, data, plan);
    ASSERT_TRUE(cpu_step.ok());
    const int64_t n = (*cpu_model)->layout().total();
    std::vector<float> params(n), want(n);
    (*cpu_model)->InitParams(4, params.data());
    auto want_stats = (*cpu_step)->Compute(1, params, absl::MakeSpan(want));
    ASSERT_TRUE(want_stats.ok());
    for (bool overlap : {false, true}) {
      SCOPED_TRACE(overlap ? "overlapped" : "serial");
      auto gpu_step = StepGradient::Create(**gpu_model, *gpu_, data, plan, overlap);
      ASSERT_TRUE(gpu_step.ok());
      auto host = gpu_->AllocateHost(2 * n * sizeof(float));
      ASSERT_TRUE(host.ok());
      float* gpu_params = host->as<float>();
      std::copy(params.begin(), params.end(), gpu_params);
      absl::Span<float> grads(gpu_params + n, n);
      auto got = (*gpu_step)->Compute(1, absl::MakeConstSpan(gpu_params, n), grads);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_NEAR(got->loss_sum, want_stats->loss_sum, 1e-5 * want_stats->loss_sum);
      EXPECT_EQ(got->correct, want_stats->correct);
      ExpectClose(std::vector<float>(grads.begin(), grads.end()), want, 1e-3);
    }
  }
}

}  // namespace
}  // namespace ps
