#ifndef PS_COMMON_DEVICE_CUDA_CUDA_DEVICE_H_
#define PS_COMMON_DEVICE_CUDA_CUDA_DEVICE_H_

// The CUDA device: cuBLAS for every matrix product, one kernel per op (kernels.cu), all ops on
// one stream owned by the device, with its cuBLAS handle; the async copies on a second stream,
// ordered against the first by events. Every CUDA or cuBLAS error becomes a
// Status that names the call. Like every Device, used by one thread.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "common/device/device.h"

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
  absl::StatusOr<CopyTicket> CopyToDeviceAsync(const void* host, size_t bytes, void* device,
                                               bool after_ops) override;
  absl::StatusOr<CopyTicket> CopyToHostAsync(const void* device, size_t bytes, void* host) override;
  absl::Status OpsWaitFor(CopyTicket ticket) override;
  absl::Status WaitForCopy(CopyTicket ticket) override;
  bool overlaps_copies() const override { return true; }
  absl::StatusOr<DeviceBuffer> RegisterHostMemory(void* host, size_t bytes) override;
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
  absl::Status SumTo(int64_t n, const float* x, double* out) override;
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

 private:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal) {}
  // After the op stream has been waited for: if a softmax kernel ran since the last check, reads
  // and clears the kernels' bad-label flag (INVALID_ARGUMENT if it was set).
  absl::Status CheckLabels();
  // Copies on the copy stream, after the ops issued so far when `after_ops`, and records a new
  // ticket's event.
  absl::StatusOr<CopyTicket> CopyOnCopyStream(const void* from, size_t bytes, void* to,
                                              cudaMemcpyKind kind, bool after_ops);
  absl::StatusOr<cudaEvent_t> TicketEvent(CopyTicket ticket) const;

  // Tickets index `copy_events_`; Synchronize() frees them all for reuse, so the pool only grows
  // to the most copies issued between two synchronisations (kMaxCopiesInFlight at most).
  static constexpr size_t kMaxCopiesInFlight = 4096;

  int ordinal_;
  cudaStream_t stream_ = nullptr;  // the ops
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t ops_mark_ = nullptr;  // re-recorded on `stream_` before each copy to the host
  std::vector<cudaEvent_t> copy_events_;
  size_t copies_in_flight_ = 0;  // tickets issued since the last Synchronize()
  cublasHandle_t cublas_ = nullptr;
  int* bad_label_ = nullptr;                   // device flag written by the softmax kernels
  const char* unchecked_labels_op_ = nullptr;  // the last softmax op since the flag was read
  double* sum_ = nullptr;                      // device scalar written by the Sum kernel
};

}  // namespace ps

#endif  // PS_COMMON_DEVICE_CUDA_CUDA_DEVICE_H_
