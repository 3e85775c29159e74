#ifndef PS_COMMON_DEVICE_CUDA_GRID_CUH_
#define PS_COMMON_DEVICE_CUDA_GRID_CUH_

// Launch geometry and warp reductions shared by the kernel files. Every kernel loops grid-stride
// (over elements, or over rows with one warp per row), so any grid covers any size and the grid
// can be capped.

#include <cuda_runtime.h>

#include <cstdint>

namespace ps::cuda {

inline constexpr int kThreads = 256;
inline constexpr int kWarp = 32;
inline constexpr int kWarpsPerBlock = kThreads / kWarp;

// Blocks of kThreads for n elements: at least 1, at most 65535.
inline int BlocksFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 ? (blocks < 1 ? 1 : blocks) : 65535);
}

// Blocks of kThreads for one warp per row.
inline int WarpBlocksFor(int64_t rows) { return BlocksFor(rows * kWarp); }

// Starts `kernel` on `blocks` blocks of kThreads on `stream` and returns the launch's error (a
// bad configuration; a fault inside the kernel surfaces at the stream's next synchronisation).
template <typename... Params, typename... Args>
cudaError_t Launch(void (*kernel)(Params...), int blocks, cudaStream_t stream, Args... args) {
  kernel<<<blocks, kThreads, 0, stream>>>(args...);
  return cudaGetLastError();
}

// The grid-stride loop over elements: thread t of the grid takes elements t, t + threads, ...
// (64-bit, so that a grid covers more than 2^31 elements).
__device__ inline int64_t FirstGridElement() {
  return blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
}
__device__ inline int64_t GridElementStride() { return int64_t{blockDim.x} * gridDim.x; }

// The same over rows, one warp per row: warp w of the grid takes rows w, w + warps, ...
__device__ inline int64_t FirstWarpRow() { return FirstGridElement() / kWarp; }
__device__ inline int64_t WarpRowStride() { return GridElementStride() / kWarp; }

// The sum (or maximum) of v over the 32 lanes of a warp, in every lane. The butterfly order is
// fixed, so a warp's result does not vary from run to run.
__device__ inline float WarpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ inline float WarpMax(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

}  // namespace ps::cuda

#endif  // PS_COMMON_DEVICE_CUDA_GRID_CUH_
