#include "common/device/cuda/cuda_device.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/device/cuda/cuda_status.h"
#include "common/device/cuda/kernels.cuh"

namespace ps {

absl::StatusOr<int> CudaDevice::VisibleCount() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device usable: cudaGetDeviceCount: ", cudaGetErrorString(err)));
  }
  return count;
}

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(int ordinal) {
  ASSIGN_OR_RETURN(const int count, VisibleCount());
  if (ordinal < 0 || ordinal >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", ordinal, " requested but ", count, " visible"));
  }
  std::unique_ptr<CudaDevice> dev(new CudaDevice(ordinal));
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
  RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&dev->stream_, cudaStreamNonBlocking),
                             "cudaStreamCreate"));
  RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&dev->copy_stream_, cudaStreamNonBlocking),
                             "cudaStreamCreate"));
  RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&dev->ops_mark_, cudaEventDisableTiming),
                             "cudaEventCreate"));
  RETURN_IF_ERROR(CublasStatus(cublasCreate(&dev->cublas_), "cublasCreate"));
  RETURN_IF_ERROR(CublasStatus(cublasSetStream(dev->cublas_, dev->stream_), "cublasSetStream"));
  RETURN_IF_ERROR(CudaStatus(cudaMalloc(&dev->bad_label_, sizeof(int)), "cudaMalloc"));
  RETURN_IF_ERROR(CudaStatus(cudaMemset(dev->bad_label_, 0, sizeof(int)), "cudaMemset"));
  RETURN_IF_ERROR(CudaStatus(cudaMalloc(&dev->sum_, sizeof(double)), "cudaMalloc"));
  return dev;
}

CudaDevice::~CudaDevice() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (copy_stream_ != nullptr) cudaStreamSynchronize(copy_stream_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (bad_label_ != nullptr) cudaFree(bad_label_);
  if (sum_ != nullptr) cudaFree(sum_);
  if (scratch_ != nullptr) cudaFree(scratch_);
  for (cudaEvent_t e : copy_events_) cudaEventDestroy(e);
  if (ops_mark_ != nullptr) cudaEventDestroy(ops_mark_);
  if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

std::string CudaDevice::name() const { return absl::StrCat("cuda:", ordinal_); }

namespace {

// `bytes` (at least 4, so that an empty buffer still has an address) from `allocate`, or
// RESOURCE_EXHAUSTED naming the call and the size; `free_fn` releases it.
absl::StatusOr<DeviceBuffer> AllocateWith(cudaError_t (*allocate)(void**, size_t),
                                          cudaError_t (*free_fn)(void*), const char* what,
                                          size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = allocate(&p, std::max<size_t>(bytes, 4));
  if (err != cudaSuccess) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " of ", bytes, " bytes: ", cudaGetErrorString(err)));
  }
  return DeviceBuffer(p, bytes, free_fn);
}

}  // namespace

absl::StatusOr<DeviceBuffer> CudaDevice::Allocate(size_t bytes) {
  ASSIGN_OR_RETURN(DeviceBuffer buffer,
                   AllocateWith([](void** p, size_t n) { return cudaMalloc(p, n); }, cudaFree,
                                "cudaMalloc", bytes));
  RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(buffer.as<void>(), 0, bytes, stream_), "cudaMemsetAsync"));
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  return buffer;
}

absl::StatusOr<DeviceBuffer> CudaDevice::AllocateHost(size_t bytes) {
  ASSIGN_OR_RETURN(DeviceBuffer buffer,
                   AllocateWith([](void** p, size_t n) { return cudaMallocHost(p, n); },
                                cudaFreeHost, "cudaMallocHost", bytes));
  std::memset(buffer.as<void>(), 0, bytes);
  return buffer;
}

absl::Status CudaDevice::CopyToDevice(const void* host, size_t bytes, void* device) {
  // The host buffer may be reused as soon as this returns, so the copy completes first.
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_),
                             "cudaMemcpyAsync H2D"));
  return CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

absl::Status CudaDevice::CopyToHost(const void* device, size_t bytes, void* host) {
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_),
                             "cudaMemcpyAsync D2H"));
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  return CheckLabels();
}

absl::Status CudaDevice::Fill(float value, int64_t n, float* x) {
  return CudaStatus(cuda::LaunchFill(value, n, x, stream_), "Fill kernel");
}

absl::Status CudaDevice::Synchronize() {
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  RETURN_IF_ERROR(
      CudaStatus(cudaStreamSynchronize(copy_stream_), "cudaStreamSynchronize (copies)"));
  copies_in_flight_ = 0;
  return CheckLabels();
}

absl::StatusOr<Device::CopyTicket> CudaDevice::CopyOnCopyStream(const void* from, size_t bytes,
                                                                void* to, cudaMemcpyKind kind,
                                                                bool after_ops) {
  if (copies_in_flight_ == kMaxCopiesInFlight) {
    return absl::FailedPreconditionError(absl::StrCat(
        kMaxCopiesInFlight, " async copies issued without a Synchronize() in between"));
  }
  if (copies_in_flight_ == copy_events_.size()) {
    cudaEvent_t e = nullptr;
    RETURN_IF_ERROR(
        CudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
    copy_events_.push_back(e);
  }
  if (after_ops) {
    // A stream waits on an event's latest record at the time of the wait call, so one mark event
    // serves every copy.
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(ops_mark_, stream_), "cudaEventRecord"));
    RETURN_IF_ERROR(
        CudaStatus(cudaStreamWaitEvent(copy_stream_, ops_mark_, 0), "cudaStreamWaitEvent"));
  }
  RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(to, from, bytes, kind, copy_stream_),
                 kind == cudaMemcpyHostToDevice ? "cudaMemcpyAsync H2D" : "cudaMemcpyAsync D2H"));
  const CopyTicket ticket = static_cast<CopyTicket>(copies_in_flight_);
  RETURN_IF_ERROR(CudaStatus(cudaEventRecord(copy_events_[copies_in_flight_], copy_stream_),
                             "cudaEventRecord"));
  ++copies_in_flight_;
  return ticket;
}

absl::StatusOr<cudaEvent_t> CudaDevice::TicketEvent(CopyTicket ticket) const {
  if (ticket < 0 || static_cast<size_t>(ticket) >= copies_in_flight_) {
    return absl::InvalidArgumentError(absl::StrCat("copy ticket ", ticket, " is not in flight (",
                                                   copies_in_flight_, " since the last sync)"));
  }
  return copy_events_[ticket];
}

absl::StatusOr<Device::CopyTicket> CudaDevice::CopyToDeviceAsync(const void* host, size_t bytes,
                                                                 void* device, bool after_ops) {
  return CopyOnCopyStream(host, bytes, device, cudaMemcpyHostToDevice, after_ops);
}

absl::StatusOr<Device::CopyTicket> CudaDevice::CopyToHostAsync(const void* device, size_t bytes,
                                                               void* host) {
  return CopyOnCopyStream(device, bytes, host, cudaMemcpyDeviceToHost, /*after_ops=*/true);
}

absl::Status CudaDevice::OpsWaitFor(CopyTicket ticket) {
  ASSIGN_OR_RETURN(cudaEvent_t done, TicketEvent(ticket));
  return CudaStatus(cudaStreamWaitEvent(stream_, done, 0), "cudaStreamWaitEvent");
}

absl::Status CudaDevice::WaitForCopy(CopyTicket ticket) {
  ASSIGN_OR_RETURN(cudaEvent_t done, TicketEvent(ticket));
  // Not CheckLabels(): that waits for every op, and a layer's gradient must not wait for the
  // layers below it.
  return CudaStatus(cudaEventSynchronize(done), "cudaEventSynchronize");
}

absl::StatusOr<DeviceBuffer> CudaDevice::RegisterHostMemory(void* host, size_t bytes) {
  if (host == nullptr || bytes == 0) return DeviceBuffer();
  // Whole pages: the driver locks pages, and a mapping is always whole pages.
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(host) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(host) + bytes + page - 1) / page * page;
  void* first = reinterpret_cast<void*>(begin);
  RETURN_IF_ERROR(CudaStatus(cudaHostRegister(first, end - begin, cudaHostRegisterDefault),
                             "cudaHostRegister"));
  return DeviceBuffer(first, end - begin, [](void* p) { cudaHostUnregister(p); });
}

absl::Status CudaDevice::Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                              const float* a, const float* b, float beta, float* c) {
  ASSIGN_OR_RETURN(const GemmPlan plan, PlanGemm(trans_a, trans_b, m, n, k));
  if (!plan.has_work) return absl::OkStatus();
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands and keep
  // each one's transpose flag and leading dimension.
  return CublasStatus(
      cublasSgemm(cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                  n, m, k, &alpha, b, plan.ldb, a, plan.lda, &beta, c, plan.ldc),
      "cublasSgemm");
}

absl::Status CudaDevice::AddBias(int rows, int cols, const float* bias, float* x) {
  return CudaStatus(cuda::LaunchAddBias(rows, cols, bias, x, stream_), "AddBias kernel");
}

absl::Status CudaDevice::SumRows(int rows, int cols, const float* x, float beta, float* out) {
  return CudaStatus(cuda::LaunchSumRows(rows, cols, x, beta, out, stream_), "SumRows kernel");
}

absl::Status CudaDevice::ReluForward(int64_t n, const float* x, float* y) {
  return CudaStatus(cuda::LaunchReluForward(n, x, y, stream_), "ReluForward kernel");
}

absl::Status CudaDevice::ReluBackward(int64_t n, const float* y, const float* dy, float* dx) {
  return CudaStatus(cuda::LaunchReluBackward(n, y, dy, dx, stream_), "ReluBackward kernel");
}

absl::Status CudaDevice::CheckLabels() {
  if (unchecked_labels_op_ == nullptr) return absl::OkStatus();
  const char* op = unchecked_labels_op_;
  unchecked_labels_op_ = nullptr;
  int bad = 0;
  RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(&bad, bad_label_, sizeof(int), cudaMemcpyDeviceToHost, stream_),
                 "cudaMemcpyAsync D2H"));
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  if (bad == 0) return absl::OkStatus();
  RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(bad_label_, 0, sizeof(int), stream_), "cudaMemsetAsync"));
  return absl::InvalidArgumentError(
      absl::StrCat(op, " (or a loss or embedding op before it): a label is outside [0, classes)",
                   " or a token id outside [0, vocab)"));
}

absl::Status CudaDevice::SoftmaxCrossEntropy(int rows, int classes, const float* logits,
                                             const int32_t* labels, float* probs,
                                             float* loss_per_row, float* correct_per_row) {
  RETURN_IF_ERROR(
      CudaStatus(cuda::LaunchSoftmaxCrossEntropy(rows, classes, logits, labels, probs, loss_per_row,
                                                 correct_per_row, bad_label_, stream_),
                 "SoftmaxCrossEntropy kernel"));
  unchecked_labels_op_ = "SoftmaxCrossEntropy";  // read at the next wait: no stall per batch
  return absl::OkStatus();
}

absl::Status CudaDevice::SoftmaxCrossEntropyBackward(int rows, int classes, const float* probs,
                                                     const int32_t* labels, float scale,
                                                     float* dlogits) {
  RETURN_IF_ERROR(CudaStatus(cuda::LaunchSoftmaxCrossEntropyBackward(
                                 rows, classes, probs, labels, scale, dlogits, bad_label_, stream_),
                             "SoftmaxCrossEntropyBackward kernel"));
  unchecked_labels_op_ = "SoftmaxCrossEntropyBackward";
  return absl::OkStatus();
}

absl::StatusOr<double> CudaDevice::Sum(int64_t n, const float* x) {
  RETURN_IF_ERROR(SumTo(n, x, sum_));
  double out = 0.0;
  RETURN_IF_ERROR(CopyToHost(sum_, sizeof(double), &out));
  return out;
}

absl::Status CudaDevice::SumTo(int64_t n, const float* x, double* out) {
  return CudaStatus(cuda::LaunchSum(n, x, out, stream_), "Sum kernel");
}

absl::Status CudaDevice::Im2Col(int batch, int height, int width, int channels, int kernel,
                                const float* x, float* cols) {
  RETURN_IF_ERROR(ValidConvShapeOf(height, width, channels, kernel, "Im2Col").status());
  return CudaStatus(cuda::LaunchIm2Col(batch, height, width, channels, kernel, x, cols, stream_),
                    "Im2Col kernel");
}

absl::Status CudaDevice::Col2Im(int batch, int height, int width, int channels, int kernel,
                                const float* dcols, float* dx) {
  RETURN_IF_ERROR(ValidConvShapeOf(height, width, channels, kernel, "Col2Im").status());
  return CudaStatus(cuda::LaunchCol2Im(batch, height, width, channels, kernel, dcols, dx, stream_),
                    "Col2Im kernel");
}

absl::Status CudaDevice::MaxPoolForward(int batch, int height, int width, int channels, int pool,
                                        const float* x, float* y, int32_t* argmax) {
  if (pool < 1 || height % pool != 0 || width % pool != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("MaxPool: ", height, "x", width, " does not divide by pool ", pool));
  }
  return CudaStatus(
      cuda::LaunchMaxPoolForward(batch, height, width, channels, pool, x, y, argmax, stream_),
      "MaxPoolForward kernel");
}

absl::Status CudaDevice::MaxPoolBackward(int64_t y_size, const float* dy, const int32_t* argmax,
                                         int64_t x_size, float* dx) {
  RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(dx, 0, sizeof(float) * x_size, stream_), "cudaMemsetAsync"));
  return CudaStatus(cuda::LaunchMaxPoolScatter(y_size, dy, argmax, dx, stream_),
                    "MaxPoolScatter kernel");
}

absl::Status CudaDevice::EmbeddingConcatForward(int batch, int width, const float* x, int fields,
                                                int dim, const float* rows, const int32_t* lookups,
                                                float* y) {
  return CudaStatus(
      cuda::LaunchEmbeddingConcatForward(batch, width, x, fields, dim, rows, lookups, y, stream_),
      "EmbeddingConcatForward kernel");
}

absl::Status CudaDevice::EmbeddingConcatBackward(int batch, int width, const float* dy, int fields,
                                                 int dim, int64_t unique, const int32_t* offsets,
                                                 const int32_t* positions, float* dx,
                                                 float* row_grads) {
  return CudaStatus(cuda::LaunchEmbeddingConcatBackward(batch, width, dy, fields, dim, unique,
                                                        offsets, positions, dx, row_grads, stream_),
                    "EmbeddingConcatBackward kernels");
}

absl::Status CudaDevice::DotInteractionForward(int batch, int n, int dim, const float* x,
                                               float* y) {
  return CudaStatus(cuda::LaunchDotInteractionForward(batch, n, dim, x, y, stream_),
                    "DotInteractionForward kernel");
}

absl::Status CudaDevice::DotInteractionBackward(int batch, int n, int dim, const float* x,
                                                const float* dy, float* dx) {
  return CudaStatus(cuda::LaunchDotInteractionBackward(batch, n, dim, x, dy, dx, stream_),
                    "DotInteractionBackward kernel");
}

absl::Status CudaDevice::LogisticLoss(int rows, const float* logits, const int32_t* labels,
                                      float* probs, float* loss_per_row, float* correct_per_row) {
  RETURN_IF_ERROR(CudaStatus(cuda::LaunchLogisticLoss(rows, logits, labels, probs, loss_per_row,
                                                      correct_per_row, bad_label_, stream_),
                             "LogisticLoss kernel"));
  unchecked_labels_op_ = "LogisticLoss";
  return absl::OkStatus();
}

absl::Status CudaDevice::LogisticLossBackward(int rows, const float* probs, const int32_t* labels,
                                              float scale, float* dlogits) {
  RETURN_IF_ERROR(CudaStatus(
      cuda::LaunchLogisticLossBackward(rows, probs, labels, scale, dlogits, bad_label_, stream_),
      "LogisticLossBackward kernel"));
  unchecked_labels_op_ = "LogisticLossBackward";
  return absl::OkStatus();
}

}  // namespace ps
