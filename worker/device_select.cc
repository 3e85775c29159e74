#include "worker/device_select.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
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

absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const std::string& spec) {
  if (spec == "cpu") return std::unique_ptr<Device>(std::make_unique<CpuDevice>());
  absl::string_view rest(spec);
  int ordinal = 0;
  if (rest == "cuda") {
    ordinal = 0;
  } else if (rest.substr(0, 5) == "cuda:" && absl::SimpleAtoi(rest.substr(5), &ordinal) &&
             ordinal >= 0) {
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--device '", spec, "' is not cpu, cuda or cuda:N"));
  }
#ifdef PS_HAVE_CUDA
  auto dev = CudaDevice::Create(ordinal);
  if (!dev.ok()) return dev.status();
  return std::unique_ptr<Device>(std::move(*dev));
#else
  return absl::FailedPreconditionError(
      absl::StrCat("--device ", spec,
                   ": this build has no CUDA device (configure with -DPS_ENABLE_CUDA=ON "
                   "on a machine with nvcc)"));
#endif
}

}  // namespace ps
