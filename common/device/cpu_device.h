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
  // The CPU kernels OpenBLAS chose for this process ("Haswell", "SkylakeX", ...; the environment
  // variable OPENBLAS_CORETYPE overrides its choice at start). Kernels of other cores sum in
  // another order, so the last bits of a product may differ between them.
  static std::string BlasKernels();
  std::string name() const override { return "cpu"; }
  bool host_addressable() const override { return true; }
  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override;
  // Host and device memory are the same here.
  absl::StatusOr<DeviceBuffer> AllocateHost(size_t bytes) override { return Allocate(bytes); }
  absl::Status CopyToDevice(const void* host, size_t bytes, void* device) override;
  absl::Status CopyToHost(const void* device, size_t bytes, void* host) override;
  absl::Status Fill(float value, int64_t n, float* x) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }
  // The compute ops of device_ops.def: cpu_device.cc, the transformer ops in
  // cpu_transformer_ops.cc.
#define PS_DEVICE_OP(ReturnType, Name, Params, Args) ReturnType Name Params override;
#include "common/device/device_ops.def"
#undef PS_DEVICE_OP
};

}  // namespace ps

#endif  // PS_COMMON_DEVICE_CPU_DEVICE_H_
