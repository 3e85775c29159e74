#ifndef PS_WORKER_DEVICE_SELECT_H_
#define PS_WORKER_DEVICE_SELECT_H_

// Chooses the compute device from a --device spec.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/device/device.h"

namespace ps {

// "cpu", "cuda" (GPU 0) or "cuda:N". INVALID_ARGUMENT for another spelling; FAILED_PRECONDITION
// for CUDA when this build has no CUDA device or no such GPU is visible.
absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const std::string& spec);

// Whether this build includes the CUDA device.
bool BuiltWithCuda();

}  // namespace ps

#endif  // PS_WORKER_DEVICE_SELECT_H_
