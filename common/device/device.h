#ifndef PS_COMMON_DEVICE_DEVICE_H_
#define PS_COMMON_DEVICE_DEVICE_H_

// The compute device a worker runs forward and backward on. Every pointer passed to an op is
// device memory obtained from Allocate(); host data crosses only through CopyToDevice and
// CopyToHost. Matrices are row-major. Ops are issued in order; results are visible to the host
// after Synchronize() (CopyToHost synchronises by itself). A Device is used by one thread.
//
// CpuDevice (cpu_device.h) is the reference; other devices are validated against it.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/device/element_kernels.h"

namespace ps {

// An owning handle to device memory of `bytes()` bytes; released by the device's deleter.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(void* ptr, size_t bytes, std::function<void(void*)> deleter)
      : ptr_(ptr, std::move(deleter)), bytes_(bytes) {}
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_.get());
  }
  size_t bytes() const { return bytes_; }

 private:
  std::unique_ptr<void, std::function<void(void*)>> ptr_{nullptr, [](void*) {}};
  size_t bytes_ = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  // True when device memory is ordinary host memory (the CPU device): host buffers may then be
  // passed to the ops directly, and the copies to and from the device can be skipped.
  virtual bool host_addressable() const { return false; }

  // Memory. Allocate returns zero-filled device memory or RESOURCE_EXHAUSTED.
  virtual absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) = 0;
  // Zero-filled host memory that this device copies to and from fastest: page-locked (pinned)
  // for CUDA, so copies are DMA transfers without a staging copy. The trainer keeps the weights
  // it pulls and the gradients it pushes here.
  virtual absl::StatusOr<DeviceBuffer> AllocateHost(size_t bytes) = 0;
  virtual absl::Status CopyToDevice(const void* host, size_t bytes, void* device) = 0;
  virtual absl::Status CopyToHost(const void* device, size_t bytes, void* host) = 0;
  virtual absl::Status Fill(float value, int64_t n, float* x) = 0;
  // Waits for every op and every copy issued so far; ends every CopyTicket.
  virtual absl::Status Synchronize() = 0;

  // Copies that overlap with the ops. A device with a copy engine (CUDA) runs them on a stream of
  // their own, in the order issued, ordered against the ops only where the contract below says
  // so; the defaults copy at once and return when done, which satisfies the same contract. The
  // synchronous copies above are ordered with the ops only.
  // - CopyToDeviceAsync starts copying `host` to `device` now, beside the ops: no op issued so far
  //   may still read or write `device` (the caller knows; Synchronize() guarantees it). With
  //   `after_ops` it starts once the ops issued so far are done instead, so they may. Ops
  //   issued after OpsWaitFor(ticket) see the data. `host` must stay unchanged until
  //   WaitForCopy(ticket) or Synchronize() returns.
  // - CopyToHostAsync copies `device` to `host` once the ops issued so far are done. The host
  //   sees the data once WaitForCopy(ticket) or Synchronize() returns; ops issued in between must
  //   not write `device`.
  // A ticket is valid until the next Synchronize() (CUDA refuses others: INVALID_ARGUMENT). Host
  // memory from AllocateHost or RegisterHostMemory makes the copies truly asynchronous; other
  // host memory is correct but may block the caller.
  using CopyTicket = int;
  virtual absl::StatusOr<CopyTicket> CopyToDeviceAsync(const void* host, size_t bytes, void* device,
                                                       bool /*after_ops*/) {
    absl::Status done = CopyToDevice(host, bytes, device);
    if (!done.ok()) return done;
    return 0;
  }
  virtual absl::StatusOr<CopyTicket> CopyToHostAsync(const void* device, size_t bytes, void* host) {
    absl::Status done = CopyToHost(device, bytes, host);
    if (!done.ok()) return done;
    return 0;
  }
  virtual absl::Status OpsWaitFor(CopyTicket /*ticket*/) { return absl::OkStatus(); }
  virtual absl::Status WaitForCopy(CopyTicket /*ticket*/) { return absl::OkStatus(); }
  // True when the async copies above really run beside the ops, so that issuing them layer by
  // layer is worth its bookkeeping.
  virtual bool overlaps_copies() const { return false; }
  // Page-locks host memory this device did not allocate (the shared-memory region with the
  // shards) for as long as the returned handle lives, so copies to and from it are DMA transfers
  // like those of AllocateHost memory. Whole pages are locked, so ranges that share a page must
  // be registered as one. The memory stays usable if this fails, only slower. The default (host
  // memory needs no pinning) does nothing.
  virtual absl::StatusOr<DeviceBuffer> RegisterHostMemory(void* /*host*/, size_t /*bytes*/) {
    return DeviceBuffer();
  }

  // The compute ops (Gemm, the layers' forward and backward kernels, the losses), declared with
  // their contracts in device_ops.def.
#define PS_DEVICE_OP(ReturnType, Name, Params, Args) virtual ReturnType Name Params = 0;
#include "common/device/device_ops.def"
#undef PS_DEVICE_OP

  // The same sum as Sum, written to `out` (device memory, one double) without waiting for it: a
  // step reads all its sums back at once at its end.
  virtual absl::Status SumTo(int64_t n, const float* x, double* out) {
    absl::StatusOr<double> sum = Sum(n, x);
    if (!sum.ok()) return sum.status();
    return CopyToDevice(&*sum, sizeof(double), out);
  }
};

// What every device's Gemm checks and derives from the sizes. has_work is false when the product
// is empty (m or n is 0: nothing to write). The leading dimensions are those of the row-major
// operands as stored (A is k x m when transposed, else m x k; B is n x k or k x n; C is m x n),
// at least 1 as BLAS requires.
struct GemmPlan {
  bool has_work = false;
  int lda = 1, ldb = 1, ldc = 1;
};
// INVALID_ARGUMENT for a negative size.
inline absl::StatusOr<GemmPlan> PlanGemm(bool trans_a, bool trans_b, int m, int n, int k) {
  if (m < 0 || n < 0 || k < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: negative size ", m, "x", n, "x", k));
  }
  return GemmPlan{m > 0 && n > 0, std::max(1, trans_a ? m : k), std::max(1, trans_b ? k : n),
                  std::max(1, n)};
}

// The shape of a valid convolution (element_kernels.h); INVALID_ARGUMENT, naming `op`, when the
// kernel does not fit in the image.
inline absl::StatusOr<ValidConvShape> ValidConvShapeOf(int height, int width, int channels,
                                                       int kernel, const char* op) {
  const ValidConvShape s = ValidConvShapeFor(height, width, channels, kernel);
  if (s.out_h < 1 || s.out_w < 1) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": kernel larger than image"));
  }
  return s;
}

}  // namespace ps

#endif  // PS_COMMON_DEVICE_DEVICE_H_
