// CPU/CUDA parity of the gpt model's ops and of a whole gpt training step. Skips when no GPU is
// visible. Tolerances:
// - exact: the embedding gather and its sums (plain adds in the CPU's order, no atomics);
// - 1e-6 relative: Axpy (the GPU fuses the multiply-add: one rounding instead of two);
// - 1e-5 relative to the largest output: LayerNorm and GELU (other libm; the GPU reduces a row in
//   a different order and may fuse multiply-adds), attention (cuBLAS products against the CPU's
//   loops);
// - the training step: loss to 1e-5 relative, gradients to 1e-3 of the largest one.

#include <vector>

#include "common/nn/model_registry.h"
#include "tests/common/base/random_vector.h"
#include "tests/common/device/cuda/cuda_parity.h"

namespace ps {
namespace {

TEST_F(CudaParity, Axpy) {
  const auto x = RandomVector(1000, 1);
  auto y = RandomVector(1000, 2);
  float* gy = Up(y);
  ASSERT_TRUE(gpu_->Axpy(1000, -0.75f, Up(x), gy).ok());
  ASSERT_TRUE(cpu_.Axpy(1000, -0.75f, x.data(), y.data()).ok());
  ExpectClose(Down(gy, y.size()), y, 1e-6);
}

// Rows of 96 (three strides of a warp) and of 20 (less than one), with gradients accumulated
// onto earlier ones (grads_beta 1) and overwritten (0).
TEST_F(CudaParity, LayerNormForwardAndBackward) {
  for (const int dim : {96, 20}) {
    const int rows = 300;  // more than one chunk of the parameter gradients' partial sums
    const auto x = RandomVector(rows * dim, 3, -2.0f, 3.0f);
    const auto gamma = RandomVector(dim, 4, 0.5f, 1.5f);
    const auto beta = RandomVector(dim, 5);
    const auto dy = RandomVector(rows * dim, 6);
    for (const float grads_beta : {0.0f, 1.0f}) {
      std::vector<float> y(rows * dim), mean(rows), rstd(rows), dx(rows * dim);
      auto dgamma = RandomVector(dim, 7), dbeta = RandomVector(dim, 8);
      float* gdgamma = Up(dgamma);
      float* gdbeta = Up(dbeta);
      ASSERT_TRUE(cpu_.LayerNormForward(rows, dim, x.data(), gamma.data(), beta.data(), y.data(),
                                        mean.data(), rstd.data())
                      .ok());
      ASSERT_TRUE(cpu_.LayerNormBackward(rows, dim, x.data(), gamma.data(), mean.data(),
                                         rstd.data(), dy.data(), dx.data(), dgamma.data(),
                                         dbeta.data(), grads_beta)
                      .ok());
      float* gx = Up(x);
      float* ggamma = Up(gamma);
      float* gy = Up(std::vector<float>(y.size()));
      float* gmean = Up(mean);
      float* grstd = Up(rstd);
      float* gdx = Up(std::vector<float>(dx.size()));
      ASSERT_TRUE(gpu_->LayerNormForward(rows, dim, gx, ggamma, Up(beta), gy, gmean, grstd).ok());
      ASSERT_TRUE(gpu_->LayerNormBackward(rows, dim, gx, ggamma, gmean, grstd, Up(dy), gdx, gdgamma,
                                          gdbeta, grads_beta)
                      .ok());
      ExpectClose(Down(gy, y.size()), y, 1e-5);
      ExpectClose(Down(gmean, rows), mean, 1e-5);
      ExpectClose(Down(grstd, rows), rstd, 1e-5);
      ExpectClose(Down(gdx, dx.size()), dx, 1e-5);
      ExpectClose(Down(gdgamma, dim), dgamma, 1e-5);
      ExpectClose(Down(gdbeta, dim), dbeta, 1e-5);
    }
  }
}

TEST_F(CudaParity, GeluForwardAndBackward) {
  const int64_t n = 5000;
  const auto x = RandomVector(n, 9, -6.0f, 6.0f);
  const auto dy = RandomVector(n, 10);
  std::vector<float> y(n), dx(n);
  ASSERT_TRUE(cpu_.GeluForward(n, x.data(), y.data()).ok());
  ASSERT_TRUE(cpu_.GeluBackward(n, x.data(), dy.data(), dx.data()).ok());
  float* gx = Up(x);
  float* gy = Up(std::vector<float>(n));
  float* gdx = Up(dy);  // in place, as the model calls it
  ASSERT_TRUE(gpu_->GeluForward(n, gx, gy).ok());
  ASSERT_TRUE(gpu_->GeluBackward(n, gx, gdx, gdx).ok());
  ExpectClose(Down(gy, n), y, 1e-5);
  ExpectClose(Down(gdx, n), dx, 1e-5);
}

// A context longer than a warp (the softmax rows span several lane strides) and one shorter.
TEST_F(CudaParity, CausalAttentionForwardAndBackward) {
  for (const int t : {45, 7}) {
    const int batch = 3, heads = 4, head_dim = 8, c = heads * head_dim;
    const int64_t qkv_size = int64_t{batch} * t * 3 * c, out_size = int64_t{batch} * t * c;
    const int64_t att_size = int64_t{batch} * heads * t * t;
    const auto qkv = RandomVector(qkv_size, 11, -2.0f, 2.0f);
    const auto dout = RandomVector(out_size, 12);
    std::vector<float> att(att_size), out(out_size), dqkv(qkv_size);
    ASSERT_TRUE(
        cpu_.CausalAttentionForward(batch, t, heads, head_dim, qkv.data(), att.data(), out.data())
            .ok());
    ASSERT_TRUE(cpu_.CausalAttentionBackward(batch, t, heads, head_dim, qkv.data(), att.data(),
                                             dout.data(), dqkv.data())
                    .ok());
    float* gqkv = Up(qkv);
    float* gatt = Up(std::vector<float>(att_size, 7.0f));  // every entry written, masked ones 0
    float* gout = Up(std::vector<float>(out_size));
    float* gdqkv = Up(std::vector<float>(qkv_size, 7.0f));  // overwritten
    ASSERT_TRUE(gpu_->CausalAttentionForward(batch, t, heads, head_dim, gqkv, gatt, gout).ok());
    ASSERT_TRUE(
        gpu_->CausalAttentionBackward(batch, t, heads, head_dim, gqkv, gatt, Up(dout), gdqkv).ok());
    const auto got_att = Down(gatt, att_size);
    ExpectClose(got_att, att, 1e-5);
    for (int64_t i = 0; i < att_size; ++i) {
      if ((i % t) > (i / t) % t) {
        ASSERT_EQ(got_att[i], 0.0f) << "masked weight " << i;
      }
    }
    ExpectClose(Down(gout, out_size), out, 1e-5);
    ExpectClose(Down(gdqkv, qkv_size), dqkv, 1e-5);
  }
}

TEST_F(CudaParity, TokenEmbeddingForwardAndBackward) {
  const int batch = 5, t = 13, dim = 300, vocab = 11;  // dim over one block of threads
  std::vector<float> ids(batch * t);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<float>((i * 7) % vocab);
  const auto wte = RandomVector(vocab * dim, 13);
  const auto wpe = RandomVector(t * dim, 14);
  const auto dy = RandomVector(int64_t{batch} * t * dim, 15);
  for (const float grads_beta : {0.0f, 1.0f}) {
    std::vector<float> y(dy.size());
    auto dwte = RandomVector(wte.size(), 16), dwpe = RandomVector(wpe.size(), 17);
    float* gdwte = Up(dwte);
    float* gdwpe = Up(dwpe);
    ASSERT_TRUE(cpu_.TokenEmbeddingForward(batch, t, dim, vocab, ids.data(), wte.data(), wpe.data(),
                                           y.data())
                    .ok());
    ASSERT_TRUE(cpu_.TokenEmbeddingBackward(batch, t, dim, vocab, ids.data(), dy.data(),
                                            dwte.data(), dwpe.data(), grads_beta)
                    .ok());
    float* gids = Up(ids);
    float* gy = Up(std::vector<float>(y.size()));
    ASSERT_TRUE(gpu_->TokenEmbeddingForward(batch, t, dim, vocab, gids, Up(wte), Up(wpe), gy).ok());
    ASSERT_TRUE(
        gpu_->TokenEmbeddingBackward(batch, t, dim, vocab, gids, Up(dy), gdwte, gdwpe, grads_beta)
            .ok());
    EXPECT_EQ(Down(gy, y.size()), y);
    EXPECT_EQ(Down(gdwte, dwte.size()), dwte);
    EXPECT_EQ(Down(gdwpe, dwpe.size()), dwpe);
  }
  // An id outside the vocabulary is reported at the next wait, as a bad label is; then cleared.
  ids[17] = static_cast<float>(vocab);
  ASSERT_TRUE(gpu_->TokenEmbeddingForward(batch, t, dim, vocab, Up(ids), Up(wte), Up(wpe),
                                          Up(std::vector<float>(dy.size())))
                  .ok());
  EXPECT_EQ(gpu_->Synchronize().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

// A whole step of a 2-layer model: the loss and every gradient, CPU against GPU.
TEST_F(CudaParity, GptTrainingStep) {
  const int batch = 4, t = 40, vocab = 29;
  SampleShape text;
  text.features = t;
  text.labels = t;
  text.num_classes = vocab;
  ModelSpec spec;
  spec.name = "gpt";
  spec.layers = 2;
  spec.heads = 4;
  spec.dim = 64;
  auto cpu_model = MakeModel(spec, text, cpu_, batch);
  auto gpu_model = MakeModel(spec, text, *gpu_, batch);
  ASSERT_TRUE(cpu_model.ok() && gpu_model.ok());
  const int64_t n = (*cpu_model)->layout().total();
  std::vector<float> params(n);
  (*cpu_model)->InitParams(5, params.data());
  std::vector<float> x(batch * t);
  std::vector<int32_t> labels(batch * t);
  for (int i = 0; i < batch * t; ++i) {
    x[i] = static_cast<float>((i * 13 + i / 7) % vocab);
    labels[i] = (i * 5 + 3) % vocab;
  }
  std::vector<float> grads(n);
  auto want = (*cpu_model)
                  ->ForwardBackward(params.data(), x.data(), labels.data(), batch, 1.0f,
                                    grads.data(), {}, true);
  ASSERT_TRUE(want.ok()) << want.status();
  float* ggrads = Up(std::vector<float>(n));
  auto got =
      (*gpu_model)->ForwardBackward(Up(params), Up(x), Up(labels), batch, 1.0f, ggrads, {}, true);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_NEAR(got->loss_sum, want->loss_sum, 1e-5 * want->loss_sum);
  EXPECT_EQ(got->count, want->count);
  ExpectClose(Down(ggrads, n), grads, 1e-3);
}

}  // namespace
}  // namespace ps
