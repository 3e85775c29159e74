#ifndef PS_COMMON_CUDA_CUDA_DEVICE_H_
#define PS_COMMON_CUDA_CUDA_DEVICE_H_

// The CUDA device: cuBLAS for every matrix product, one kernel per op (kernels.cu), all work on
// one stream owned by the device, with its cuBLAS handle. Every CUDA or cuBLAS error becomes a
// Status that names the call. Like every Device, used by one thread.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>

#include "common/device.h"

namespace ps {

class CudaDevice final : public Device {
 public:
  // Binds GPU `ordinal`. FAILED_PRECONDITION when no such GPU is visible (or the driver is
  // missing), naming what was found.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(int ordinal);
  ~CudaDevice() override;

  std::string name() const override;
  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override;
  absl::StatusOr<DeviceBuffer> AllocateHost(size_t bytes) override;
  absl::Status CopyToDevice(const void* host, size_t bytes, void* device) override;
  absl::Status CopyToHost(const void* device, size_t bytes, void* host) override;
  absl::Status Fill(float value, int64_t n, float* x) override;
  absl::Status Synchronize() override;
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

 private:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal) {}
  // Reads and clears the kernels' bad-label flag: INVALID_ARGUMENT if it was set.
  absl::Status CheckLabels(const char* op);

  int ordinal_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  int* bad_label_ = nullptr;  // device flag written by the softmax kernels
  double* sum_ = nullptr;     // device scalar written by the Sum kernel
};

}  // namespace ps

#endif  // PS_COMMON_CUDA_CUDA_DEVICE_H_
