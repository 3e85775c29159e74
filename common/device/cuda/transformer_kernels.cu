// The gpt model's kernels (kernels.cuh declares the launchers; device.h states the ops'
// contracts; CpuDevice's cpu_transformer_ops.cc is the reference they are tested against).
// Row ops give a row to one warp: the model's rows are 64 to 1536 wide, so a warp's 32 lanes
// each take a strided share and the warp reduces by shuffles, without shared memory.

#include <cfloat>

#include "common/device/cuda/grid.cuh"
#include "common/device/cuda/kernels.cuh"
#include "common/device/element_kernels.h"

namespace ps::cuda {

namespace {

constexpr float kLayerNormEpsilon = 1e-5f;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;
constexpr int kIdTile = 1024;  // token ids staged in shared memory per pass

__global__ void AxpyKernel(int64_t n, float alpha, const float* x, float* y) {
  for (int64_t i = FirstGridElement(); i < n; i += GridElementStride()) {
    y[i] += alpha * x[i];
  }
}

__global__ void LayerNormForwardKernel(int rows, int dim, const float* x, const float* gamma,
                                       const float* beta, float* y, float* mean, float* rstd) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = FirstWarpRow(); r < rows; r += WarpRowStride()) {
    const float* in = x + r * dim;
    float sum = 0.0f;
    for (int d = lane; d < dim; d += kWarp) sum += in[d];
    const float m = WarpSum(sum) / dim;
    float squares = 0.0f;
    for (int d = lane; d < dim; d += kWarp) squares += (in[d] - m) * (in[d] - m);
    const float s = 1.0f / sqrtf(WarpSum(squares) / dim + kLayerNormEpsilon);
    float* out = y + r * dim;
    for (int d = lane; d < dim; d += kWarp) out[d] = (in[d] - m) * s * gamma[d] + beta[d];
    if (lane == 0) {
      mean[r] = m;
      rstd[r] = s;
    }
  }
}

__global__ void LayerNormInputGradKernel(int rows, int dim, const float* x, const float* gamma,
                                         const float* mean, const float* rstd, const float* dy,
                                         float* dx) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = FirstWarpRow(); r < rows; r += WarpRowStride()) {
    const float* in = x + r * dim;
    const float* g = dy + r * dim;
    const float m = mean[r], s = rstd[r];
    float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
    for (int d = lane; d < dim; d += kWarp) {
      const float dxhat = g[d] * gamma[d];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * (in[d] - m) * s;
    }
    const float a = WarpSum(sum_dxhat) / dim;
    const float b = WarpSum(sum_dxhat_xhat) / dim;
    float* out = dx + r * dim;
    for (int d = lane; d < dim; d += kWarp) {
      out[d] = s * (g[d] * gamma[d] - a - (in[d] - m) * s * b);
    }
  }
}

// Block (32, 8) over 32 columns and chunk blockIdx.y of the rows: partials[chunk][d] for dgamma,
// then partials[chunks + chunk][d] for dbeta.
__global__ void LayerNormParamPartialsKernel(int rows, int dim, const float* x, const float* mean,
                                             const float* rstd, const float* dy, int chunks,
                                             float* partials) {
  __shared__ float dgamma_part[8][kWarp];
  __shared__ float dbeta_part[8][kWarp];
  const int d = blockIdx.x * kWarp + threadIdx.x;
  const int chunk = blockIdx.y;
  const int per_chunk = (rows + chunks - 1) / chunks;
  const int begin = chunk * per_chunk;
  const int end = min(rows, begin + per_chunk);
  float dgamma = 0.0f, dbeta = 0.0f;
  if (d < dim) {
    for (int r = begin + threadIdx.y; r < end; r += blockDim.y) {
      const float g = dy[int64_t{r} * dim + d];
      dgamma += g * (x[int64_t{r} * dim + d] - mean[r]) * rstd[r];
      dbeta += g;
    }
  }
  dgamma_part[threadIdx.y][threadIdx.x] = dgamma;
  dbeta_part[threadIdx.y][threadIdx.x] = dbeta;
  __syncthreads();
  if (threadIdx.y == 0 && d < dim) {
    for (int k = 1; k < blockDim.y; ++k) {
      dgamma += dgamma_part[k][threadIdx.x];
      dbeta += dbeta_part[k][threadIdx.x];
    }
    partials[int64_t{chunk} * dim + d] = dgamma;
    partials[int64_t{chunks + chunk} * dim + d] = dbeta;
  }
}

// out[d] = grads_beta * out[d] + the sum of the chunks' partials, in chunk order (grads_beta 0:
// `out` is not read).
__global__ void AddChunksKernel(int dim, int chunks, const float* partials, float grads_beta,
                                float* out) {
  for (int d = blockIdx.x * blockDim.x + threadIdx.x; d < dim; d += blockDim.x * gridDim.x) {
    float sum = 0.0f;
    for (int k = 0; k < chunks; ++k) sum += partials[int64_t{k} * dim + d];
    out[d] = grads_beta == 0.0f ? sum : grads_beta * out[d] + sum;
  }
}

__device__ inline float GeluTanh(float v) {
  return tanhf(kGeluScale * (v + kGeluCubic * v * v * v));
}

__global__ void GeluForwardKernel(int64_t n, const float* x, float* y) {
  for (int64_t i = FirstGridElement(); i < n; i += GridElementStride()) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + GeluTanh(v));
  }
}

__global__ void GeluBackwardKernel(int64_t n, const float* x, const float* dy, float* dx) {
  for (int64_t i = FirstGridElement(); i < n; i += GridElementStride()) {
    const float v = x[i];
    const float th = GeluTanh(v);
    const float slope = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * kGeluScale *
                                                 (1.0f + 3.0f * kGeluCubic * v * v);
    dx[i] = dy[i] * slope;
  }
}

__global__ void CausalSoftmaxKernel(int64_t rows, int t, float* scores) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = FirstWarpRow(); r < rows; r += WarpRowStride()) {
    const int last = static_cast<int>(r % t);  // the query's position: keys 0..last
    float* w = scores + r * t;
    float top = -FLT_MAX;
    for (int j = lane; j <= last; j += kWarp) top = fmaxf(top, w[j]);
    top = WarpMax(top);
    float total = 0.0f;
    for (int j = lane; j <= last; j += kWarp) {
      w[j] = expf(w[j] - top);
      total += w[j];
    }
    const float inv = 1.0f / WarpSum(total);
    for (int j = lane; j < t; j += kWarp) w[j] = j <= last ? w[j] * inv : 0.0f;
  }
}

__global__ void CausalSoftmaxBackwardKernel(int64_t rows, int t, const float* att, float scale,
                                            float* dweights) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = FirstWarpRow(); r < rows; r += WarpRowStride()) {
    const int last = static_cast<int>(r % t);
    const float* w = att + r * t;
    float* dw = dweights + r * t;
    float weighted = 0.0f;
    for (int j = lane; j <= last; j += kWarp) weighted += w[j] * dw[j];
    weighted = WarpSum(weighted);
    for (int j = lane; j < t; j += kWarp) {
      dw[j] = j <= last ? w[j] * (dw[j] - weighted) * scale : 0.0f;
    }
  }
}

// element::TokenId, and *bad_id = 1 where it is -1.
__device__ inline int TokenId(const float* ids, int64_t r, int vocab, int* bad_id) {
  const int id = element::TokenId(ids, r, vocab);
  if (id < 0) *bad_id = 1;
  return id;
}

__global__ void TokenEmbeddingForwardKernel(int batch, int t, int dim, int vocab, const float* ids,
                                            const float* wte, const float* wpe, float* y,
                                            int* bad_id) {
  const int64_t n = int64_t{batch} * t * dim;
  for (int64_t i = FirstGridElement(); i < n; i += GridElementStride()) {
    const int64_t r = i / dim;
    const int d = static_cast<int>(i % dim);
    const int id = TokenId(ids, r, vocab, bad_id);
    y[i] = id < 0 ? 0.0f : wte[int64_t{id} * dim + d] + wpe[(r % t) * dim + d];
  }
}

// dwpe (t, dim): one thread per element.
__global__ void PositionGradKernel(int batch, int t, int dim, const float* dy, float* dwpe,
                                   float grads_beta) {
  const int64_t n = int64_t{t} * dim;
  for (int64_t i = FirstGridElement(); i < n; i += GridElementStride()) {
    float sum = grads_beta == 0.0f ? 0.0f : grads_beta * dwpe[i];
    for (int b = 0; b < batch; ++b) sum += dy[int64_t{b} * n + i];
    dwpe[i] = sum;
  }
}

// dwte (vocab, dim): block v takes token v (grid-stride over tokens); its threads take columns.
__global__ void TokenGradKernel(int64_t positions, int dim, int vocab, const float* ids,
                                const float* dy, float* dwte, float grads_beta, int* bad_id) {
  __shared__ int tile[kIdTile];
  for (int v = blockIdx.x; v < vocab; v += gridDim.x) {
    for (int base = 0; base < dim; base += blockDim.x) {
      const int d = base + threadIdx.x;
      const bool active = d < dim;
      float* out = dwte + int64_t{v} * dim + d;
      float sum = !active || grads_beta == 0.0f ? 0.0f : grads_beta * *out;
      for (int64_t first = 0; first < positions; first += kIdTile) {
        const int count = static_cast<int>(min(int64_t{kIdTile}, positions - first));
        __syncthreads();  // the previous tile is no longer read
        for (int k = threadIdx.x; k < count; k += blockDim.x) {
          tile[k] = TokenId(ids, first + k, vocab, bad_id);
        }
        __syncthreads();
        if (active) {
          for (int k = 0; k < count; ++k) {
            if (tile[k] == v) sum += dy[(first + k) * dim + d];
          }
        }
      }
      if (active) *out = sum;
    }
  }
}

}  // namespace

cudaError_t LaunchAxpy(int64_t n, float alpha, const float* x, float* y, cudaStream_t stream) {
  return Launch(AxpyKernel, BlocksFor(n), stream, n, alpha, x, y);
}

cudaError_t LaunchLayerNormForward(int rows, int dim, const float* x, const float* gamma,
                                   const float* beta, float* y, float* mean, float* rstd,
                                   cudaStream_t stream) {
  return Launch(LayerNormForwardKernel, WarpBlocksFor(rows), stream, rows, dim, x, gamma, beta, y,
                mean, rstd);
}

int LayerNormParamChunks(int rows) {
  const int chunks = (rows + 255) / 256;  // 256 rows per chunk: 32 per thread of a block
  return chunks < 1 ? 1 : (chunks > 256 ? 256 : chunks);
}

cudaError_t LaunchLayerNormBackward(int rows, int dim, const float* x, const float* gamma,
                                    const float* mean, const float* rstd, const float* dy,
                                    float* dx, float* dgamma, float* dbeta, float grads_beta,
                                    float* partials, cudaStream_t stream) {
  LayerNormInputGradKernel<<<WarpBlocksFor(rows), kThreads, 0, stream>>>(rows, dim, x, gamma, mean,
                                                                         rstd, dy, dx);
  const int chunks = LayerNormParamChunks(rows);
  const dim3 grid((dim + kWarp - 1) / kWarp, chunks);
  LayerNormParamPartialsKernel<<<grid, dim3(kWarp, 8), 0, stream>>>(rows, dim, x, mean, rstd, dy,
                                                                    chunks, partials);
  AddChunksKernel<<<BlocksFor(dim), kThreads, 0, stream>>>(dim, chunks, partials, grads_beta,
                                                           dgamma);
  return Launch(AddChunksKernel, BlocksFor(dim), stream, dim, chunks,
                partials + int64_t{chunks} * dim, grads_beta, dbeta);
}

cudaError_t LaunchGeluForward(int64_t n, const float* x, float* y, cudaStream_t stream) {
  return Launch(GeluForwardKernel, BlocksFor(n), stream, n, x, y);
}

cudaError_t LaunchGeluBackward(int64_t n, const float* x, const float* dy, float* dx,
                               cudaStream_t stream) {
  return Launch(GeluBackwardKernel, BlocksFor(n), stream, n, x, dy, dx);
}

cudaError_t LaunchCausalSoftmax(int64_t rows, int t, float* scores, cudaStream_t stream) {
  return Launch(CausalSoftmaxKernel, WarpBlocksFor(rows), stream, rows, t, scores);
}

cudaError_t LaunchCausalSoftmaxBackward(int64_t rows, int t, const float* att, float scale,
                                        float* dweights, cudaStream_t stream) {
  return Launch(CausalSoftmaxBackwardKernel, WarpBlocksFor(rows), stream, rows, t, att, scale,
                dweights);
}

cudaError_t LaunchTokenEmbeddingForward(int batch, int t, int dim, int vocab, const float* ids,
                                        const float* wte, const float* wpe, float* y, int* bad_id,
                                        cudaStream_t stream) {
  return Launch(TokenEmbeddingForwardKernel, BlocksFor(int64_t{batch} * t * dim), stream, batch, t,
                dim, vocab, ids, wte, wpe, y, bad_id);
}

cudaError_t LaunchTokenEmbeddingBackward(int batch, int t, int dim, int vocab, const float* ids,
                                         const float* dy, float* dwte, float* dwpe,
                                         float grads_beta, int* bad_id, cudaStream_t stream) {
  PositionGradKernel<<<BlocksFor(int64_t{t} * dim), kThreads, 0, stream>>>(batch, t, dim, dy, dwpe,
                                                                           grads_beta);
  const int threads = dim < kThreads ? (dim + kWarp - 1) / kWarp * kWarp : kThreads;
  const int blocks = vocab < 65535 ? (vocab < 1 ? 1 : vocab) : 65535;  // a block per row of dwte
  TokenGradKernel<<<blocks, threads, 0, stream>>>(int64_t{batch} * t, dim, vocab, ids, dy, dwte,
                                                  grads_beta, bad_id);
  return cudaGetLastError();
}

}  // namespace ps::cuda
