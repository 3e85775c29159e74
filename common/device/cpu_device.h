#ifndef PS_COMMON_DEVICE_CPU_DEVICE_H_
#define PS_COMMON_DEVICE_CPU_DEVICE_H_

#include "common/device/device.h"

namespace ps {

// The reference device: host memory, OpenBLAS sgemm for every matrix product, plain loops for
// the elementwise ops. Not thread-safe (one per worker thread), like every Device.
class CpuDevice final : public Device {
 public:
  // `blas_threads` sets OpenBLAS's thread count for the whole process (OpenBLAS has one global
  // pool). One is best for the small GEMMs of a worker that shares its cores with other
  // processes: OpenBLAS's spinning helper threads otherwise steal the cores the servers need.
  explicit CpuDevice(int blas_threads = 1);
  std::string name() const override { return "cpu"; }
  bool host_addressable() const override { return true; }
  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override;
  // Host and device memory are the same here.
  absl::StatusOr<DeviceBuffer> AllocateHost(size_t bytes) override { return Allocate(bytes); }
  absl::Status CopyToDevice(const void* host, size_t bytes, void* device) override;
  absl::Status CopyToHost(const void* device, size_t bytes, void* host) override;
  absl::Status Fill(float value, int64_t n, float* x) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }
  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    const float* b, float beta, float* c) override;
  absl::Status AddBias(int rows, int cols, const float* bias, float* x) override;
  absl::Status SumRows(int rows, int cols, const float* x, float beta, float* out) override;
  absl::Status ReluForward(int64_t n, const float* x, float* y) override;
  absl::Status ReluBackward(int64_t n, const float* y, const float* dy, float* dx) override;
  absl::Status SoftmaxCrossEntropy(int rows, int classes, const float* logits,
                                   const int32_t* labels, float* probs, float* loss_per_row,
                                   float* correct_per_row) override;
  absl::Status SoftmaxCrossEntropyBackward(int rows, int classes, const float* probs,
                                           const int32_t* labels, float scale,
                                           float* dlogits) override;
  absl::StatusOr<double> Sum(int64_t n, const float* x) override;
  absl::Status Im2Col(int batch, int height, int width, int channels, int kernel, const float* x,
                      float* cols) override;
  absl::Status Col2Im(int batch, int height, int width, int channels, int kernel,
                      const float* dcols, float* dx) override;
  absl::Status MaxPoolForward(int batch, int height, int width, int channels, int pool,
                              const float* x, float* y, int32_t* argmax) override;
  absl::Status MaxPoolBackward(int64_t y_size, const float* dy, const int32_t* argmax,
                               int64_t x_size, float* dx) override;
  absl::Status EmbeddingConcatForward(int batch, int width, const float* x, int fields, int dim,
                                      const float* rows, const int32_t* lookups, float* y) override;
  absl::Status EmbeddingConcatBackward(int batch, int width, const float* dy, int fields, int dim,
                                       int64_t unique, const int32_t* offsets,
                                       const int32_t* positions, float* dx,
                                       float* row_grads) override;
  absl::Status DotInteractionForward(int batch, int n, int dim, const float* x, float* y) override;
  absl::Status DotInteractionBackward(int batch, int n, int dim, const float* x, const float* dy,
                                      float* dx) override;
  absl::Status LogisticLoss(int rows, const float* logits, const int32_t* labels, float* probs,
                            float* loss_per_row, float* correct_per_row) override;
  absl::Status LogisticLossBackward(int rows, const float* probs, const int32_t* labels,
                                    float scale, float* dlogits) override;
  // Transformer ops: cpu_transformer_ops.cc.
  absl::Status Axpy(int64_t n, float alpha, const float* x, float* y) override;
  absl::Status LayerNormForward(int rows, int dim, const float* x, const float* gamma,
                                const float* beta, float* y, float* mean, float* rstd) override;
  absl::Status LayerNormBackward(int rows, int dim, const float* x, const float* gamma,
                                 const float* mean, const float* rstd, const float* dy, float* dx,
                                 float* dgamma, float* dbeta, float grads_beta) override;
  absl::Status GeluForward(int64_t n, const float* x, float* y) override;
  absl::Status GeluBackward(int64_t n, const float* x, const float* dy, float* dx) override;
  absl::Status CausalAttentionForward(int batch, int t, int heads, int head_dim, const float* qkv,
                                      float* att, float* out) override;
  absl::Status CausalAttentionBackward(int batch, int t, int heads, int head_dim, const float* qkv,
                                       const float* att, const float* dout, float* dqkv) override;
  absl::Status TokenEmbeddingForward(int batch, int t, int dim, int vocab, const float* ids,
                                     const float* wte, const float* wpe, float* y) override;
  absl::Status TokenEmbeddingBackward(int batch, int t, int dim, int vocab, const float* ids,
                                      const float* dy, float* dwte, float* dwpe,
                                      float grads_beta) override;
};

}  // namespace ps

#endif  // PS_COMMON_DEVICE_CPU_DEVICE_H_
