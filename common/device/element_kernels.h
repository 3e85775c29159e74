#ifndef PS_COMMON_DEVICE_ELEMENT_KERNELS_H_
#define PS_COMMON_DEVICE_ELEMENT_KERNELS_H_

// Code that both devices run, compiled by nvcc for the GPU (__host__ __device__) and by the host
// compiler for the CPU:
// - The bodies of the CUDA kernels that index and gather: element i of an op's output as a
//   function of its inputs. Each CUDA kernel calls its function once per element
//   (common/device/cuda/kernels.cu). CpuDevice keeps faster loops of its own for these ops, and
//   element_kernels_test checks every element against them, so the GPU's indexing is tested on
//   machines without a GPU, where the CUDA parity tests skip.
// - The rules and formulas both devices apply as they are: token ids, and each row's loss.
//
// Contracts: the sizes are those the Device methods have validated (a kernel that fits the image,
// a pool that divides it, lookups, positions and labels in range); nothing allocates or fails.
// Sums run in CpuDevice's order: on the host they give its bits, and so does the GPU where a sum
// only adds (Col2Im, row gradients); where it multiplies too, nvcc may fuse the multiply-adds,
// and its exp and log may differ from the host's in the last bits.

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define PS_HOST_DEVICE __host__ __device__
#else
#define PS_HOST_DEVICE
#endif

namespace ps {

// The shape of a valid (unpadded, stride 1) convolution of a height x width x channels image
// with a kernel x kernel window, the same on every device.
struct ValidConvShape {
  int out_h = 0;
  int out_w = 0;
  int64_t patch_len = 0;  // one im2col row: kernel * kernel * channels
};

// Unchecked: ValidConvShapeOf (device.h) refuses a kernel larger than the image.
PS_HOST_DEVICE inline ValidConvShape ValidConvShapeFor(int height, int width, int channels,
                                                       int kernel) {
  return ValidConvShape{height - kernel + 1, width - kernel + 1,
                        int64_t{kernel} * kernel * channels};
}

namespace element {

// Element i of Im2Col's cols (batch * out_h * out_w rows in (n, oh, ow) order, patch_len
// columns in (kh, kw, c) order) from the NHWC images x.
PS_HOST_DEVICE inline float Im2Col(int height, int width, int channels, int kernel, const float* x,
                                   int64_t i) {
  const ValidConvShape s = ValidConvShapeFor(height, width, channels, kernel);
  const int64_t row = i / s.patch_len;
  const int p = static_cast<int>(i % s.patch_len);
  const int ow = static_cast<int>(row % s.out_w);
  const int oh = static_cast<int>((row / s.out_w) % s.out_h);
  const int64_t img = row / (int64_t{s.out_w} * s.out_h);
  const int c = p % channels;
  const int kw = (p / channels) % kernel;
  const int kh = p / (channels * kernel);
  return x[((img * height + oh + kh) * width + ow + kw) * channels + c];
}

// Element i of Col2Im's dx (NHWC): the sum of the cols entries Im2Col copied from it. CpuDevice
// adds them as it walks the output pixels upwards, which is kh and kw downwards.
PS_HOST_DEVICE inline float Col2Im(int height, int width, int channels, int kernel,
                                   const float* dcols, int64_t i) {
  const ValidConvShape s = ValidConvShapeFor(height, width, channels, kernel);
  const int c = static_cast<int>(i % channels);
  const int xw = static_cast<int>((i / channels) % width);
  const int xh = static_cast<int>((i / (int64_t{channels} * width)) % height);
  const int64_t img = i / (int64_t{channels} * width * height);
  float sum = 0.0f;
  for (int kh = kernel - 1; kh >= 0; --kh) {
    const int oh = xh - kh;
    if (oh < 0 || oh >= s.out_h) continue;
    for (int kw = kernel - 1; kw >= 0; --kw) {
      const int ow = xw - kw;
      if (ow < 0 || ow >= s.out_w) continue;
      const int64_t row = (img * s.out_h + oh) * s.out_w + ow;
      sum += dcols[row * s.patch_len + (int64_t{kh} * kernel + kw) * channels + c];
    }
  }
  return sum;
}

// For element i of MaxPoolForward's y (batch, height / pool, width / pool, channels): the index
// in x of its window's largest value, the first in row-major window order on a tie.
PS_HOST_DEVICE inline int64_t MaxPoolArgmax(int height, int width, int channels, int pool,
                                            const float* x, int64_t i) {
  const int out_h = height / pool;
  const int out_w = width / pool;
  const int c = static_cast<int>(i % channels);
  const int ow = static_cast<int>((i / channels) % out_w);
  const int oh = static_cast<int>((i / (int64_t{channels} * out_w)) % out_h);
  const int64_t img = i / (int64_t{channels} * out_w * out_h);
  int64_t best = ((img * height + oh * pool) * width + ow * pool) * channels + c;
  for (int ph = 0; ph < pool; ++ph) {
    for (int pw = 0; pw < pool; ++pw) {
      const int64_t j = ((img * height + oh * pool + ph) * width + ow * pool + pw) * channels + c;
      if (x[j] > x[best]) best = j;
    }
  }
  return best;
}

// Element i of EmbeddingConcatForward's y (batch, width + fields * dim): sample b's dense
// columns, then the rows its fields look up.
PS_HOST_DEVICE inline float EmbeddingConcat(int width, const float* x, int fields, int dim,
                                            const float* rows, const int32_t* lookups, int64_t i) {
  const int64_t out_width = width + int64_t{fields} * dim;
  const int64_t b = i / out_width;
  const int64_t c = i % out_width;
  if (c < width) return x[b * width + c];
  const int64_t f = (c - width) / dim;
  return rows[int64_t{lookups[b * fields + f]} * dim + (c - width) % dim];
}

// Element i of EmbeddingConcatBackward's row_grads (unique, dim): the gradients of unique row
// u's lookups (positions offsets[u] to offsets[u + 1], each b * fields + f), in their order.
PS_HOST_DEVICE inline float EmbeddingRowGrad(int width, const float* dy, int fields, int dim,
                                             const int32_t* offsets, const int32_t* positions,
                                             int64_t i) {
  const int64_t out_width = width + int64_t{fields} * dim;
  const int64_t u = i / dim;
  const int d = static_cast<int>(i % dim);
  float sum = 0.0f;
  for (int32_t k = offsets[u]; k < offsets[u + 1]; ++k) {
    const int64_t b = positions[k] / fields;
    const int64_t f = positions[k] % fields;
    sum += dy[b * out_width + width + f * dim + d];
  }
  return sum;
}

// Where pair (hi, lo), hi > lo, stands among the dot interaction's pairs, in the order
// i = 1..n-1, j = 0..i-1.
PS_HOST_DEVICE inline int64_t PairIndex(int hi, int lo) { return int64_t{hi} * (hi - 1) / 2 + lo; }

// Element i of DotInteractionForward's y (batch, dim + n (n - 1) / 2): sample b's first vector,
// then the dot products of its pairs of vectors, each over d ascending.
PS_HOST_DEVICE inline float DotInteraction(int n, int dim, const float* x, int64_t i) {
  const int64_t out_width = dim + int64_t{n} * (n - 1) / 2;
  const int64_t b = i / out_width;
  const int64_t c = i % out_width;
  const float* v = x + b * n * dim;
  if (c < dim) return v[c];
  const int64_t k = c - dim;
  int hi = 1;
  while (PairIndex(hi + 1, 0) <= k) ++hi;
  const int lo = static_cast<int>(k - PairIndex(hi, 0));
  float dot = 0.0f;
  for (int d = 0; d < dim; ++d) dot += v[int64_t{hi} * dim + d] * v[int64_t{lo} * dim + d];
  return dot;
}

// Element e of DotInteractionBackward's dx (batch, n * dim): the pass-through gradient (vector
// 0 only), then each pair's gradient times the other vector, j ascending.
PS_HOST_DEVICE inline float DotInteractionGrad(int n, int dim, const float* x, const float* dy,
                                               int64_t e) {
  const int64_t out_width = dim + int64_t{n} * (n - 1) / 2;
  const int64_t b = e / (int64_t{n} * dim);
  const int i = static_cast<int>((e / dim) % n);
  const int d = static_cast<int>(e % dim);
  const float* v = x + b * n * dim;
  const float* g = dy + b * out_width;
  float sum = i == 0 ? g[d] : 0.0f;
  for (int j = 0; j < n; ++j) {
    if (j == i) continue;
    sum += g[dim + (j > i ? PairIndex(j, i) : PairIndex(i, j))] * v[int64_t{j} * dim + d];
  }
  return sum;
}

// The token id stored (as a float) at ids[r], or -1 when it is not an integer in [0, vocab): the
// one rule both devices refuse token ids by.
PS_HOST_DEVICE inline int TokenId(const float* ids, int64_t r, int vocab) {
  const float f = ids[r];
  if (!(f >= 0.0f && f < static_cast<float>(vocab))) return -1;  // NaN too
  const int id = static_cast<int>(f);
  return static_cast<float>(id) == f ? id : -1;
}

// What a loss gives for one row besides its probabilities.
struct RowLoss {
  float loss = 0.0f;
  float correct = 0.0f;  // 1 where the prediction is the label
};

// One row of SoftmaxCrossEntropy, label in [0, classes): the softmax of the logits z into p, the
// loss -log p[label], and whether the argmax (the first on a tie) is the label. Log-sum-exp in
// double after subtracting the largest logit, so exp stays in range and the loss never takes
// log(0).
PS_HOST_DEVICE inline RowLoss SoftmaxCrossEntropyRow(int classes, const float* z, int label,
                                                     float* p) {
  int argmax = 0;
  for (int j = 1; j < classes; ++j) {
    if (z[j] > z[argmax]) argmax = j;
  }
  const float zmax = z[argmax];
  double denom = 0.0;
  for (int j = 0; j < classes; ++j) denom += exp(static_cast<double>(z[j] - zmax));
  const double log_denom = log(denom);
  for (int j = 0; j < classes; ++j) {
    p[j] = static_cast<float>(exp(static_cast<double>(z[j] - zmax) - log_denom));
  }
  return RowLoss{static_cast<float>(log_denom - static_cast<double>(z[label] - zmax)),
                 argmax == label ? 1.0f : 0.0f};
}

// One row of LogisticLoss, label 0 or 1: p(label 1) into *prob, the loss -log p(label) =
// log(1 + e^z) - z label with log(1 + e^z) = max(z, 0) + log1p(e^-|z|), and whether z > 0
// predicts the label.
PS_HOST_DEVICE inline RowLoss LogisticRow(float logit, int label, float* prob) {
  const double z = logit;
  *prob = static_cast<float>(1.0 / (1.0 + exp(-z)));
  return RowLoss{static_cast<float>(fmax(z, 0.0) + log1p(exp(-fabs(z))) - z * label),
                 (z > 0) == (label == 1) ? 1.0f : 0.0f};
}

}  // namespace element
}  // namespace ps

#endif  // PS_COMMON_DEVICE_ELEMENT_KERNELS_H_
