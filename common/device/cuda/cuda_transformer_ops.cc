// CudaDevice's transformer ops (device.h states their contracts; the kernels are in
// transformer_kernels.cu). Attention runs per sequence as cuBLAS strided-batched products over
// its heads: a head's queries, keys and values are column blocks of the qkv rows (row length 3c,
// head h at offset h * head_dim), so one stride walks the heads without copying them apart.

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/device/cuda/cuda_device.h"
#include "common/device/cuda/cuda_status.h"
#include "common/device/cuda/kernels.cuh"

namespace ps {

absl::StatusOr<float*> CudaDevice::Scratch(int64_t floats) {
  if (floats <= scratch_floats_) return scratch_;
  if (scratch_ != nullptr) {
    // The ops before may still read the old buffer.
    RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
    RETURN_IF_ERROR(CudaStatus(cudaFree(scratch_), "cudaFree"));
    scratch_ = nullptr;
    scratch_floats_ = 0;
  }
  const cudaError_t err = cudaMalloc(&scratch_, sizeof(float) * floats);
  if (err != cudaSuccess) {
    scratch_ = nullptr;
    return absl::ResourceExhaustedError(absl::StrCat(
        "cudaMalloc of ", sizeof(float) * floats, " bytes of scratch: ", cudaGetErrorString(err)));
  }
  scratch_floats_ = floats;
  return scratch_;
}

absl::Status CudaDevice::StridedGemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                                     const float* a, int lda, int64_t stride_a, const float* b,
                                     int ldb, int64_t stride_b, float beta, float* c, int ldc,
                                     int64_t stride_c, int count) {
  // As in Gemm: row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  return CublasStatus(
      cublasSgemmStridedBatched(cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb,
                                stride_b, a, lda, stride_a, &beta, c, ldc, stride_c, count),
      "cublasSgemmStridedBatched");
}

absl::Status CudaDevice::Axpy(int64_t n, float alpha, const float* x, float* y) {
  return CudaStatus(cuda::LaunchAxpy(n, alpha, x, y, stream_), "Axpy kernel");
}

absl::Status CudaDevice::LayerNormForward(int rows, int dim, const float* x, const float* gamma,
                                          const float* beta, float* y, float* mean, float* rstd) {
  return CudaStatus(cuda::LaunchLayerNormForward(rows, dim, x, gamma, beta, y, mean, rstd, stream_),
                    "LayerNormForward kernel");
}

absl::Status CudaDevice::LayerNormBackward(int rows, int dim, const float* x, const float* gamma,
                                           const float* mean, const float* rstd, const float* dy,
                                           float* dx, float* dgamma, float* dbeta,
                                           float grads_beta) {
  ASSIGN_OR_RETURN(float* partials, Scratch(2 * int64_t{cuda::LayerNormParamChunks(rows)} * dim));
  return CudaStatus(cuda::LaunchLayerNormBackward(rows, dim, x, gamma, mean, rstd, dy, dx, dgamma,
                                                  dbeta, grads_beta, partials, stream_),
                    "LayerNormBackward kernels");
}

absl::Status CudaDevice::GeluForward(int64_t n, const float* x, float* y) {
  return CudaStatus(cuda::LaunchGeluForward(n, x, y, stream_), "GeluForward kernel");
}

absl::Status CudaDevice::GeluBackward(int64_t n, const float* x, const float* dy, float* dx) {
  return CudaStatus(cuda::LaunchGeluBackward(n, x, dy, dx, stream_), "GeluBackward kernel");
}

absl::Status CudaDevice::CausalAttentionForward(int batch, int t, int heads, int head_dim,
                                                const float* qkv, float* att, float* out) {
  const int c = heads * head_dim;
  const int64_t square = int64_t{t} * t;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (int b = 0; b < batch; ++b) {
    const float* q = qkv + int64_t{b} * t * 3 * c;
    float* weights = att + int64_t{b} * heads * square;
    // Scores q_i . k_j * scale for every (i, j); the softmax masks j > i.
    RETURN_IF_ERROR(StridedGemm(false, true, t, t, head_dim, scale, q, 3 * c, head_dim, q + c,
                                3 * c, head_dim, 0.0f, weights, t, square, heads));
  }
  RETURN_IF_ERROR(CudaStatus(cuda::LaunchCausalSoftmax(int64_t{batch} * heads * t, t, att, stream_),
                             "CausalSoftmax kernel"));
  for (int b = 0; b < batch; ++b) {
    const float* v = qkv + int64_t{b} * t * 3 * c + 2 * c;
    RETURN_IF_ERROR(StridedGemm(false, false, t, head_dim, t, 1.0f,
                                att + int64_t{b} * heads * square, t, square, v, 3 * c, head_dim,
                                0.0f, out + int64_t{b} * t * c, c, head_dim, heads));
  }
  return absl::OkStatus();
}

absl::Status CudaDevice::CausalAttentionBackward(int batch, int t, int heads, int head_dim,
                                                 const float* qkv, const float* att,
                                                 const float* dout, float* dqkv) {
  const int c = heads * head_dim;
  const int64_t square = int64_t{t} * t;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  ASSIGN_OR_RETURN(float* dweights, Scratch(heads * square));
  for (int b = 0; b < batch; ++b) {
    const float* q = qkv + int64_t{b} * t * 3 * c;
    const float* k = q + c;
    const float* v = q + 2 * c;
    float* dq = dqkv + int64_t{b} * t * 3 * c;
    float* dk = dq + c;
    float* dv = dq + 2 * c;
    const float* weights = att + int64_t{b} * heads * square;
    const float* g = dout + int64_t{b} * t * c;
    // Through out = att v: dv = att^T g, d att = g v^T.
    RETURN_IF_ERROR(StridedGemm(true, false, t, head_dim, t, 1.0f, weights, t, square, g, c,
                                head_dim, 0.0f, dv, 3 * c, head_dim, heads));
    RETURN_IF_ERROR(StridedGemm(false, true, t, t, head_dim, 1.0f, g, c, head_dim, v, 3 * c,
                                head_dim, 0.0f, dweights, t, square, heads));
    // Through the softmax and the scale: d scores.
    RETURN_IF_ERROR(CudaStatus(
        cuda::LaunchCausalSoftmaxBackward(int64_t{heads} * t, t, weights, scale, dweights, stream_),
        "CausalSoftmaxBackward kernel"));
    // Through scores = q k^T: dq = d scores k, dk = d scores^T q.
    RETURN_IF_ERROR(StridedGemm(false, false, t, head_dim, t, 1.0f, dweights, t, square, k, 3 * c,
                                head_dim, 0.0f, dq, 3 * c, head_dim, heads));
    RETURN_IF_ERROR(StridedGemm(true, false, t, head_dim, t, 1.0f, dweights, t, square, q, 3 * c,
                                head_dim, 0.0f, dk, 3 * c, head_dim, heads));
  }
  return absl::OkStatus();
}

absl::Status CudaDevice::TokenEmbeddingForward(int batch, int t, int dim, int vocab,
                                               const float* ids, const float* wte, const float* wpe,
                                               float* y) {
  RETURN_IF_ERROR(CudaStatus(cuda::LaunchTokenEmbeddingForward(batch, t, dim, vocab, ids, wte, wpe,
                                                               y, bad_label_, stream_),
                             "TokenEmbeddingForward kernel"));
  unchecked_labels_op_ = "TokenEmbeddingForward";  // read at the next wait, as labels are
  return absl::OkStatus();
}

absl::Status CudaDevice::TokenEmbeddingBackward(int batch, int t, int dim, int vocab,
                                                const float* ids, const float* dy, float* dwte,
                                                float* dwpe, float grads_beta) {
  RETURN_IF_ERROR(
      CudaStatus(cuda::LaunchTokenEmbeddingBackward(batch, t, dim, vocab, ids, dy, dwte, dwpe,
                                                    grads_beta, bad_label_, stream_),
                 "TokenEmbeddingBackward kernels"));
  unchecked_labels_op_ = "TokenEmbeddingBackward";
  return absl::OkStatus();
}

}  // namespace ps
