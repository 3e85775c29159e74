#include "worker/device_select.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/status_macros.h"
#include "common/device/cpu_device.h"
#ifdef PS_HAVE_CUDA
#include "common/device/cuda/cuda_device.h"
#endif

namespace ps {

bool BuiltWithCuda() {
#ifdef PS_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<DeviceSpec> ParseDeviceSpec(const std::string& spec) {
  const absl::string_view text(spec);
  DeviceSpec parsed;
  if (text == "cpu") return parsed;
  parsed.cuda = true;
  if (text == "cuda") return parsed;
  if (text.substr(0, 5) == "cuda:" && absl::SimpleAtoi(text.substr(5), &parsed.ordinal) &&
      parsed.ordinal >= 0) {
    return parsed;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device '", spec, "' is not cpu, cuda or cuda:N"));
}

int GpuForRank(int rank, int visible) {
  if (visible <= 0) return -1;
  return (rank % visible + visible) % visible;
}

absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const std::string& spec, int rank) {
  ASSIGN_OR_RETURN(const DeviceSpec parsed, ParseDeviceSpec(spec));
  if (!parsed.cuda) return std::unique_ptr<Device>(std::make_unique<CpuDevice>());
#ifdef PS_HAVE_CUDA
  int ordinal = parsed.ordinal;
  if (ordinal < 0) {
    ASSIGN_OR_RETURN(const int visible, CudaDevice::VisibleCount());
    ordinal = GpuForRank(rank, visible);
    if (ordinal < 0) return absl::FailedPreconditionError("--device cuda: no GPU is visible");
  }
  auto dev = CudaDevice::Create(ordinal);
  if (!dev.ok()) return dev.status();
  return std::unique_ptr<Device>(std::move(*dev));
#else
  (void)rank;
  return absl::FailedPreconditionError(
      absl::StrCat("--device ", spec,
                   ": this build has no CUDA device (configure with -DPS_ENABLE_CUDA=ON "
                   "on a machine with nvcc)"));
#endif
}

}  // namespace ps
