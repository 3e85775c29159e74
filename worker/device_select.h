#ifndef PS_WORKER_DEVICE_SELECT_H_
#define PS_WORKER_DEVICE_SELECT_H_

// Chooses the compute device from a --device spec.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/device/device.h"

namespace ps {

// A parsed --device spec: the CPU, a GPU by index, or a GPU chosen by the worker's rank.
struct DeviceSpec {
  bool cuda = false;
  int ordinal = -1;  // "cuda:N": N; "cuda": -1, the GPU GpuForRank picks
};

// "cpu", "cuda" or "cuda:N" (N >= 0); INVALID_ARGUMENT for another spelling.
absl::StatusOr<DeviceSpec> ParseDeviceSpec(const std::string& spec);

// The GPU that "cuda" binds for worker `rank` when `visible` GPUs are visible: rank mod visible,
// so the workers that ps_launch starts on one host spread over its GPUs, one per GPU while there
// are as many GPUs as workers, and a worker that sees one GPU (a Kubernetes pod with
// nvidia.com/gpu: 1) takes that one. -1 when none is visible.
int GpuForRank(int rank, int visible);

// The device of `spec` for worker `rank`. FAILED_PRECONDITION for CUDA when this build has no
// CUDA device or no such GPU is visible.
absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const std::string& spec, int rank = 0);

// Whether this build includes the CUDA device.
bool BuiltWithCuda();

}  // namespace ps

#endif  // PS_WORKER_DEVICE_SELECT_H_
