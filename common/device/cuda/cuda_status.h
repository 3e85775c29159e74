#ifndef PS_COMMON_DEVICE_CUDA_CUDA_STATUS_H_
#define PS_COMMON_DEVICE_CUDA_CUDA_STATUS_H_

// CUDA and cuBLAS results as Status: INTERNAL naming the call and the error.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps {

inline absl::Status CudaStatus(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(call, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

inline absl::Status CublasStatus(cublasStatus_t st, const char* call) {
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, ": cuBLAS status ", static_cast<int>(st)));
}

}  // namespace ps

#endif  // PS_COMMON_DEVICE_CUDA_CUDA_STATUS_H_
