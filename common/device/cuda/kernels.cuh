#ifndef PS_COMMON_CUDA_KERNELS_CUH_
#define PS_COMMON_CUDA_KERNELS_CUH_

// Launchers of the CUDA kernels behind CudaDevice, one per op. Each launcher chooses the grid,
// enqueues on `stream` and returns the launch's error (cudaSuccess when it was enqueued). Shapes
// and semantics are those of the matching Device method (common/device/device.h); CpuDevice is the
// reference every kernel is tested against.

#include <cuda_runtime.h>

#include <cstdint>

namespace ps::cuda {

cudaError_t LaunchFill(float value, int64_t n, float* x, cudaStream_t stream);
// x (rows, cols) += bias (cols)
cudaError_t LaunchAddBias(int rows, int cols, const float* bias, float* x, cudaStream_t stream);
// out (cols) = beta * out + column sums of x (rows, cols)
cudaError_t LaunchSumRows(int rows, int cols, const float* x, float beta, float* out,
                          cudaStream_t stream);
cudaError_t LaunchReluForward(int64_t n, const float* x, float* y, cudaStream_t stream);
cudaError_t LaunchReluBackward(int64_t n, const float* y, const float* dy, float* dx,
                               cudaStream_t stream);
// One thread per row. Sets *bad_label to 1 when a label is outside [0, classes).
cudaError_t LaunchSoftmaxCrossEntropy(int rows, int classes, const float* logits,
                                      const int32_t* labels, float* probs, float* loss_per_row,
                                      float* correct_per_row, int* bad_label, cudaStream_t stream);
cudaError_t LaunchSoftmaxCrossEntropyBackward(int rows, int classes, const float* probs,
                                              const int32_t* labels, float scale, float* dlogits,
                                              int* bad_label, cudaStream_t stream);
// *out = sum of x[0..n), accumulated in double by one block.
cudaError_t LaunchSum(int64_t n, const float* x, double* out, cudaStream_t stream);
// x NHWC (batch, height, width, channels) -> cols (batch*out_h*out_w, kernel*kernel*channels)
cudaError_t LaunchIm2Col(int batch, int height, int width, int channels, int kernel, const float* x,
                         float* cols, cudaStream_t stream);
// One thread per pixel of dx: gathers every patch entry that was taken from it (no atomics).
cudaError_t LaunchCol2Im(int batch, int height, int width, int channels, int kernel,
                         const float* dcols, float* dx, cudaStream_t stream);
cudaError_t LaunchMaxPoolForward(int batch, int height, int width, int channels, int pool,
                                 const float* x, float* y, int32_t* argmax, cudaStream_t stream);
// dx must already be zero; windows do not overlap, so the scatter has no conflicts.
cudaError_t LaunchMaxPoolScatter(int64_t y_size, const float* dy, const int32_t* argmax, float* dx,
                                 cudaStream_t stream);
// y = [x | rows[lookups]] per row; one thread per element of y.
cudaError_t LaunchEmbeddingConcatForward(int batch, int width, const float* x, int fields, int dim,
                                         const float* rows, const int32_t* lookups, float* y,
                                         cudaStream_t stream);
// dx = dy's first width columns (unless null); row_grads: one thread per element, adding its
// row's lookups in order (deterministic, no atomics).
cudaError_t LaunchEmbeddingConcatBackward(int batch, int width, const float* dy, int fields,
                                          int dim, int64_t unique, const int32_t* offsets,
                                          const int32_t* positions, float* dx, float* row_grads,
                                          cudaStream_t stream);
// One thread per output element (a dot product of dim terms, or a copied element).
cudaError_t LaunchDotInteractionForward(int batch, int n, int dim, const float* x, float* y,
                                        cudaStream_t stream);
cudaError_t LaunchDotInteractionBackward(int batch, int n, int dim, const float* x, const float* dy,
                                         float* dx, cudaStream_t stream);
// One thread per row. Sets *bad_label to 1 when a label is neither 0 nor 1.
cudaError_t LaunchLogisticLoss(int rows, const float* logits, const int32_t* labels, float* probs,
                               float* loss_per_row, float* correct_per_row, int* bad_label,
                               cudaStream_t stream);
cudaError_t LaunchLogisticLossBackward(int rows, const float* probs, const int32_t* labels,
                                       float scale, float* dlogits, int* bad_label,
                                       cudaStream_t stream);

// Transformer ops (transformer_kernels.cu).
cudaError_t LaunchAxpy(int64_t n, float alpha, const float* x, float* y, cudaStream_t stream);
// One warp per row.
cudaError_t LaunchLayerNormForward(int rows, int dim, const float* x, const float* gamma,
                                   const float* beta, float* y, float* mean, float* rstd,
                                   cudaStream_t stream);
// dx by one warp per row; dgamma and dbeta in two passes without atomics: partial column sums
// over `chunks` blocks of rows into `partials` (2 * chunks * dim floats of scratch), then each
// column's partials added in chunk order. LayerNormParamChunks says how many chunks.
int LayerNormParamChunks(int rows);
cudaError_t LaunchLayerNormBackward(int rows, int dim, const float* x, const float* gamma,
                                    const float* mean, const float* rstd, const float* dy,
                                    float* dx, float* dgamma, float* dbeta, float grads_beta,
                                    float* partials, cudaStream_t stream);
cudaError_t LaunchGeluForward(int64_t n, const float* x, float* y, cudaStream_t stream);
cudaError_t LaunchGeluBackward(int64_t n, const float* x, const float* dy, float* dx,
                               cudaStream_t stream);
// scores (rows, t) hold scaled dot products, row r being query position r % t: each row becomes
// the softmax over its first r % t + 1 entries, zeros after. One warp per row.
cudaError_t LaunchCausalSoftmax(int64_t rows, int t, float* scores, cudaStream_t stream);
// dweights (rows, t) = d loss / d attention weight on entry; becomes d loss / d score:
// att * (dweights - sum_j att_j dweights_j) * scale, zero past the causal limit. One warp per row.
cudaError_t LaunchCausalSoftmaxBackward(int64_t rows, int t, const float* att, float scale,
                                        float* dweights, cudaStream_t stream);
// One thread per output element. Sets *bad_id to 1 when an id is not an integer in [0, vocab).
cudaError_t LaunchTokenEmbeddingForward(int batch, int t, int dim, int vocab, const float* ids,
                                        const float* wte, const float* wpe, float* y, int* bad_id,
                                        cudaStream_t stream);
// dwpe: one thread per element, adding its position's rows in batch order; dwte: one block per
// token, adding the rows of its occurrences in (batch, position) order (CpuDevice's order, so the
// sums are the same to the bit). No atomics.
cudaError_t LaunchTokenEmbeddingBackward(int batch, int t, int dim, int vocab, const float* ids,
                                         const float* dy, float* dwte, float* dwpe,
                                         float grads_beta, int* bad_id, cudaStream_t stream);

}  // namespace ps::cuda

#endif  // PS_COMMON_CUDA_KERNELS_CUH_
