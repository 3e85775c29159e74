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
  // How many GPUs this process sees (CUDA_VISIBLE_DEVICES applies); FAILED_PRECONDITION when
  // the driver cannot tell.
  static absl::StatusOr<int> VisibleCount();
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
  // The compute ops of device_ops.def: cuda_device.cc, the transformer ops in
  // cuda_transformer_ops.cc (attention is cuBLAS strided-batched GEMMs over the heads of each
  // sequence around causal-softmax kernels).
#define PS_DEVICE_OP(ReturnType, Name, Params, Args) ReturnType Name Params override;
#include "common/device/device_ops.def"
#undef PS_DEVICE_OP
  absl::Status SumTo(int64_t n, const float* x, double* out) override;

 private:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal) {}
  // After the op stream has been waited for: if a loss or token-embedding kernel ran since the
  // last check, reads and clears the kernels' bad-label flag (INVALID_ARGUMENT if it was set).
  absl::Status CheckLabels();
  // Copies on the copy stream, after the ops issued so far when `after_ops`, and records a new
  // ticket's event.
  absl::StatusOr<CopyTicket> CopyOnCopyStream(const void* from, size_t bytes, void* to,
                                              cudaMemcpyKind kind, bool after_ops);
  absl::StatusOr<cudaEvent_t> TicketEvent(CopyTicket ticket) const;
  // `floats` floats of device memory for one op's intermediate results, valid until the next
  // Scratch call. Ops are ordered on one stream, so one op's use ends before the next op's
  // begins; growing waits for the stream before freeing the old buffer.
  absl::StatusOr<float*> Scratch(int64_t floats);
  // `count` row-major products C_i = alpha op(A_i) op(B_i) + beta C_i, C_i (m, n), with leading
  // dimensions (row lengths) and strides between consecutive i in floats.
  absl::Status StridedGemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                           const float* a, int lda, int64_t stride_a, const float* b, int ldb,
                           int64_t stride_b, float beta, float* c, int ldc, int64_t stride_c,
                           int count);

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
  int* bad_label_ = nullptr;  // device flag set by the loss kernels (labels), embeddings (ids)
  const char* unchecked_labels_op_ = nullptr;  // the last softmax op since the flag was read
  double* sum_ = nullptr;                      // device scalar written by the Sum kernel
  float* scratch_ = nullptr;
  int64_t scratch_floats_ = 0;
};

}  // namespace ps

#endif  // PS_COMMON_DEVICE_CUDA_CUDA_DEVICE_H_
