#ifndef PS_COMMON_DEVICE_DEVICE_H_
#define PS_COMMON_DEVICE_DEVICE_H_

// The compute device a worker runs forward and backward on. Every pointer passed to an op is
// device memory obtained from Allocate(); host data crosses only through CopyToDevice and
// CopyToHost. Matrices are row-major. Ops are issued in order; results are visible to the host
// after Synchronize() (CopyToHost synchronises by itself). A Device is used by one thread.
//
// CpuDevice (cpu_device.h) is the reference; other devices are validated against it.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace ps {

// An owning handle to device memory of `bytes()` bytes; released by the device's deleter.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(void* ptr, size_t bytes, std::function<void(void*)> deleter)
      : ptr_(ptr, std::move(deleter)), bytes_(bytes) {}
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_.get());
  }
  size_t bytes() const { return bytes_; }

 private:
  std::unique_ptr<void, std::function<void(void*)>> ptr_{nullptr, [](void*) {}};
  size_t bytes_ = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  // True when device memory is ordinary host memory (the CPU device): host buffers may then be
  // passed to the ops directly, and the copies to and from the device can be skipped.
  virtual bool host_addressable() const { return false; }

  // Memory. Allocate returns zero-filled device memory or RESOURCE_EXHAUSTED.
  virtual absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) = 0;
  // Zero-filled host memory that this device copies to and from fastest: page-locked (pinned)
  // for CUDA, so copies are DMA transfers without a staging copy. The trainer keeps the weights
  // it pulls and the gradients it pushes here.
  virtual absl::StatusOr<DeviceBuffer> AllocateHost(size_t bytes) = 0;
  virtual absl::Status CopyToDevice(const void* host, size_t bytes, void* device) = 0;
  virtual absl::Status CopyToHost(const void* device, size_t bytes, void* host) = 0;
  virtual absl::Status Fill(float value, int64_t n, float* x) = 0;
  // Waits for every op and every copy issued so far; ends every CopyTicket.
  virtual absl::Status Synchronize() = 0;

  // Copies that overlap with the ops. A device with a copy engine (CUDA) runs them on a stream of
  // their own, in the order issued, ordered against the ops only where the contract below says
  // so; the defaults copy at once and return when done, which satisfies the same contract. The
  // synchronous copies above are ordered with the ops only.
  // - CopyToDeviceAsync starts copying `host` to `device` now, beside the ops: no op issued so far
  //   may still read or write `device` (the caller knows; Synchronize() guarantees it). With
  //   `after_ops` it starts once the ops issued so far are done instead, so they may. Ops
  //   issued after OpsWaitFor(ticket) see the data. `host` must stay unchanged until
  //   WaitForCopy(ticket) or Synchronize() returns.
  // - CopyToHostAsync copies `device` to `host` once the ops issued so far are done. The host
  //   sees the data once WaitForCopy(ticket) or Synchronize() returns; ops issued in between must
  //   not write `device`.
  // A ticket is valid until the next Synchronize() (CUDA refuses others: INVALID_ARGUMENT). Host
  // memory from AllocateHost or RegisterHostMemory makes the copies truly asynchronous; other
  // host memory is correct but may block the caller.
  using CopyTicket = int;
  virtual absl::StatusOr<CopyTicket> CopyToDeviceAsync(const void* host, size_t bytes, void* device,
                                                       bool /*after_ops*/) {
    absl::Status done = CopyToDevice(host, bytes, device);
    if (!done.ok()) return done;
    return 0;
  }
  virtual absl::StatusOr<CopyTicket> CopyToHostAsync(const void* device, size_t bytes, void* host) {
    absl::Status done = CopyToHost(device, bytes, host);
    if (!done.ok()) return done;
    return 0;
  }
  virtual absl::Status OpsWaitFor(CopyTicket /*ticket*/) { return absl::OkStatus(); }
  virtual absl::Status WaitForCopy(CopyTicket /*ticket*/) { return absl::OkStatus(); }
  // True when the async copies above really run beside the ops, so that issuing them layer by
  // layer is worth its bookkeeping.
  virtual bool overlaps_copies() const { return false; }
  // Page-locks host memory this device did not allocate (the shared-memory region with the
  // shards) for as long as the returned handle lives, so copies to and from it are DMA transfers
  // like those of AllocateHost memory. Whole pages are locked, so ranges that share a page must
  // be registered as one. The memory stays usable if this fails, only slower. The default (host
  // memory needs no pinning) does nothing.
  virtual absl::StatusOr<DeviceBuffer> RegisterHostMemory(void* /*host*/, size_t /*bytes*/) {
    return DeviceBuffer();
  }

  // c(m,n) = alpha * op(a) * op(b) + beta * c, with op(a) (m,k) and op(b) (k,n); a is (m,k) or
  // (k,m) when trans_a, b is (k,n) or (n,k) when trans_b.
  virtual absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                            const float* a, const float* b, float beta, float* c) = 0;
  // x (rows, cols) += bias (cols), broadcast over rows.
  virtual absl::Status AddBias(int rows, int cols, const float* bias, float* x) = 0;
  // out (cols) = beta * out + sum over rows of x (rows, cols). beta 0: `out` is not read, as in
  // BLAS (Gemm's beta 0 likewise), so it may hold anything.
  virtual absl::Status SumRows(int rows, int cols, const float* x, float beta, float* out) = 0;
  // y = max(x, 0), elementwise over n; y may alias x.
  virtual absl::Status ReluForward(int64_t n, const float* x, float* y) = 0;
  // dx = dy where y > 0, else 0; dx may alias dy.
  virtual absl::Status ReluBackward(int64_t n, const float* y, const float* dy, float* dx) = 0;
  // Softmax cross-entropy over `rows` rows of `classes` logits with integer labels.
  // probs (rows, classes) receives the softmax; loss_per_row (rows) the cross-entropy of each row
  // (-log p[label]); correct_per_row (rows) 1 when the arg-max equals the label, else 0.
  // Labels outside [0, classes) give INVALID_ARGUMENT: from this call on the CPU; on a device
  // whose ops run asynchronously (CUDA), from the next call that waits for all of them
  // (Synchronize, CopyToHost, Sum), so that a step is issued without waiting. The outputs are
  // then unspecified.
  virtual absl::Status SoftmaxCrossEntropy(int rows, int classes, const float* logits,
                                           const int32_t* labels, float* probs, float* loss_per_row,
                                           float* correct_per_row) = 0;
  // dlogits = scale * (probs - onehot(labels)); the gradient of scale * sum of row losses.
  virtual absl::Status SoftmaxCrossEntropyBackward(int rows, int classes, const float* probs,
                                                   const int32_t* labels, float scale,
                                                   float* dlogits) = 0;
  // Sum of the n elements of x, returned to the host.
  virtual absl::StatusOr<double> Sum(int64_t n, const float* x) = 0;
  // The same sum written to `out` (device memory, one double) without waiting for it: a step
  // reads all its sums back at once at its end.
  virtual absl::Status SumTo(int64_t n, const float* x, double* out) {
    absl::StatusOr<double> sum = Sum(n, x);
    if (!sum.ok()) return sum.status();
    return CopyToDevice(&*sum, sizeof(double), out);
  }

  // Convolution support. Images are NHWC: x (batch, height, width, channels). Square kernels,
  // stride 1, no padding: out_h = height - kernel + 1, out_w = width - kernel + 1.
  // cols (batch * out_h * out_w, kernel * kernel * channels): row (n, oh, ow) holds the patch
  // x[n, oh + kh, ow + kw, c] in (kh, kw, c) order, so that cols * W (kernel*kernel*channels,
  // out_channels) is the convolution's output, NHWC.
  virtual absl::Status Im2Col(int batch, int height, int width, int channels, int kernel,
                              const float* x, float* cols) = 0;
  // The adjoint of Im2Col: dx (batch, height, width, channels) = the sum of every patch row of
  // dcols back onto the pixels it was taken from. Overwrites dx.
  virtual absl::Status Col2Im(int batch, int height, int width, int channels, int kernel,
                              const float* dcols, float* dx) = 0;
  // Max pooling with a pool x pool window and stride pool over x (batch, height, width, channels)
  // into y (batch, height / pool, width / pool, channels); height and width must divide by pool.
  // argmax (same shape as y) receives the flat index into x of each window's maximum.
  virtual absl::Status MaxPoolForward(int batch, int height, int width, int channels, int pool,
                                      const float* x, float* y, int32_t* argmax) = 0;
  // dx (x_size elements) = 0, then dx[argmax[i]] = dy[i] for the y_size outputs. The windows do
  // not overlap, so each element of dx receives at most one value.
  virtual absl::Status MaxPoolBackward(int64_t y_size, const float* dy, const int32_t* argmax,
                                       int64_t x_size, float* dx) = 0;

  // Sparse lookups (embedding tables), DLRM's interaction and the logistic loss.
  // y (batch, width + fields * dim): row b is x's row b (width), then for f = 0..fields-1 the row
  // rows[lookups[b * fields + f]] (dim) of the step's pulled rows.
  virtual absl::Status EmbeddingConcatForward(int batch, int width, const float* x, int fields,
                                              int dim, const float* rows, const int32_t* lookups,
                                              float* y) = 0;
  // Its adjoint. dx (batch, width) = dy's first `width` columns of each row, unless dx is null.
  // row_grads (unique, dim) is overwritten: row u = the sum, over its lookups
  // positions[offsets[u] .. offsets[u + 1]) (each b * fields + f), of dy's columns of lookup f of
  // row b, added in that order, so every device gives the same sums whatever its threads.
  virtual absl::Status EmbeddingConcatBackward(int batch, int width, const float* dy, int fields,
                                               int dim, int64_t unique, const int32_t* offsets,
                                               const int32_t* positions, float* dx,
                                               float* row_grads) = 0;
  // x (batch, n * dim) holds n vectors per row; y (batch, dim + n * (n - 1) / 2) is the first
  // vector, then the dot products <x_i, x_j> for i = 1..n-1, j = 0..i-1 in that order.
  virtual absl::Status DotInteractionForward(int batch, int n, int dim, const float* x,
                                             float* y) = 0;
  // Its gradient: dx (overwritten) = dy's first dim columns on vector 0, plus for every pair
  // d<x_i, x_j> * x_j on x_i and * x_i on x_j.
  virtual absl::Status DotInteractionBackward(int batch, int n, int dim, const float* x,
                                              const float* dy, float* dx) = 0;
  // Logistic loss of `rows` logits z with labels 0 or 1: probs = sigmoid(z), loss_per_row =
  // -log p(label) (computed without overflow), correct_per_row = 1 when (z > 0) equals the label.
  // Other labels: INVALID_ARGUMENT, when SoftmaxCrossEntropy would report it.
  virtual absl::Status LogisticLoss(int rows, const float* logits, const int32_t* labels,
                                    float* probs, float* loss_per_row, float* correct_per_row) = 0;
  // dlogits = scale * (probs - label): the gradient of scale * the sum of row losses.
  virtual absl::Status LogisticLossBackward(int rows, const float* probs, const int32_t* labels,
                                            float scale, float* dlogits) = 0;

  // Transformer ops (the gpt model).
  // y += alpha * x, elementwise over n.
  virtual absl::Status Axpy(int64_t n, float alpha, const float* x, float* y) = 0;
  // Layer normalisation of `rows` rows of `dim`: y = (x - mean) * rstd * gamma + beta with
  // rstd = 1 / sqrt(var + 1e-5) (the biased variance, as PyTorch's LayerNorm); mean and rstd
  // (rows) are kept for the backward pass.
  virtual absl::Status LayerNormForward(int rows, int dim, const float* x, const float* gamma,
                                        const float* beta, float* y, float* mean, float* rstd) = 0;
  // Its gradient: dx overwritten; dgamma and dbeta (dim) = grads_beta * themselves + the sums
  // over rows (grads_beta 0: only written).
  virtual absl::Status LayerNormBackward(int rows, int dim, const float* x, const float* gamma,
                                         const float* mean, const float* rstd, const float* dy,
                                         float* dx, float* dgamma, float* dbeta,
                                         float grads_beta) = 0;
  // GELU with the tanh approximation (GPT-2's; PyTorch's GELU(approximate="tanh")):
  // y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise over n.
  virtual absl::Status GeluForward(int64_t n, const float* x, float* y) = 0;
  // dx = dy * GELU'(x), elementwise; dx may alias dy.
  virtual absl::Status GeluBackward(int64_t n, const float* x, const float* dy, float* dx) = 0;
  // Causal multi-head self-attention. qkv (batch, t, 3 * c) holds each position's query, key
  // and value, c = heads * head_dim, head h's in columns [h hd, (h + 1) hd) of each third.
  // att (batch, heads, t, t) receives the attention weights: for query position i the softmax
  // over keys j <= i of q_i . k_j / sqrt(head_dim), zero for j > i; out (batch, t, c) = the
  // weighted sum of the values, heads side by side.
  virtual absl::Status CausalAttentionForward(int batch, int t, int heads, int head_dim,
                                              const float* qkv, float* att, float* out) = 0;
  // Its gradient: dqkv (batch, t, 3 * c) overwritten, from qkv, att and dout (batch, t, c).
  virtual absl::Status CausalAttentionBackward(int batch, int t, int heads, int head_dim,
                                               const float* qkv, const float* att,
                                               const float* dout, float* dqkv) = 0;
  // Token and position embeddings: ids (batch, t) token ids as floats, wte (vocab, dim), wpe
  // (t, dim); y (batch, t, dim) = wte[id] + wpe[position]. Ids outside [0, vocab):
  // INVALID_ARGUMENT, when SoftmaxCrossEntropy would report a label.
  virtual absl::Status TokenEmbeddingForward(int batch, int t, int dim, int vocab, const float* ids,
                                             const float* wte, const float* wpe, float* y) = 0;
  // Its gradient: dwte (vocab, dim) and dwpe (t, dim) = grads_beta * themselves + the sums of
  // dy's rows onto their token's and position's rows, in (batch, position) order.
  virtual absl::Status TokenEmbeddingBackward(int batch, int t, int dim, int vocab,
                                              const float* ids, const float* dy, float* dwte,
                                              float* dwpe, float grads_beta) = 0;
};

// Gemm's size check, the same on every device: INVALID_ARGUMENT for a negative size; false when
// the product is empty (m or n is 0: nothing to write), true when there is work.
inline absl::StatusOr<bool> GemmHasWork(int m, int n, int k) {
  if (m < 0 || n < 0 || k < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: negative size ", m, "x", n, "x", k));
  }
  return m > 0 && n > 0;
}

// The shape of a valid (unpadded, stride 1) convolution of a height x width x channels image
// with a kernel x kernel window, the same on every device.
struct ValidConvShape {
  int out_h = 0;
  int out_w = 0;
  int64_t patch_len = 0;  // one im2col row: kernel * kernel * channels
};
// INVALID_ARGUMENT, naming `op`, when the kernel does not fit in the image.
inline absl::StatusOr<ValidConvShape> ValidConvShapeOf(int height, int width, int channels,
                                                       int kernel, const char* op) {
  ValidConvShape s{height - kernel + 1, width - kernel + 1, int64_t{kernel} * kernel * channels};
  if (s.out_h < 1 || s.out_w < 1) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": kernel larger than image"));
  }
  return s;
}

}  // namespace ps

#endif  // PS_COMMON_DEVICE_DEVICE_H_
