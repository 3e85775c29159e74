#include <cfloat>

#include "common/device/cuda/grid.cuh"
#include "common/device/cuda/kernels.cuh"

namespace ps::cuda {

namespace {

// ---------------------------------------------------------------------------------------------
// Kernels. Every elementwise kernel uses a grid-stride loop, so any grid covers any n.

__global__ void FillKernel(float value, int64_t n, float* x) {
  for (int64_t i = FirstGridElement(); i < n; i += GridElementStride()) {
    x[i] = value;
  }
}

// x is (rows, cols)
__global__ void AddBiasKernel(int rows, int cols, const float* bias, float* x) {
  const int64_t n = int64_t{rows} * cols;
  for (int64_t i = FirstGridElement(); i < n; i += GridElementStride()) {
    x[i] += bias[i % cols];
  }
}

// One thread per column; x is (rows, cols).
__global__ void SumRowsKernel(int rows, int cols, const float* x, float beta, float* out) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += blockDim.x * gridDim.x) {
    float sum = 0.0f;
    for (int r = 0; r < rows; ++r) sum += x[int64_t{r} * cols + j];
    out[j] = beta == 0.0f ? sum : beta * out[j] + sum;  // beta 0: `out` is not read (BLAS)
  }
}

__global__ void ReluForwardKernel(int64_t n, const float* x, float* y) {
  for (int64_t i = FirstGridElement(); i < n; i += GridElementStride()) {
    y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  }
}

__global__ void ReluBackwardKernel(int64_t n, const float* y, const float* dy, float* dx) {
  for (int64_t i = FirstGridElement(); i < n; i += GridElementStride()) {
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
  }
}

// logits, probs (rows, classes); one thread per row, log-sum-exp in double like the CPU.
__global__ void SoftmaxCrossEntropyKernel(int rows, int classes, const float* logits,
                                          const int32_t* labels, float* probs, float* loss,
                                          float* correct, int* bad_label) {
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += blockDim.x * gridDim.x) {
    const int label = labels[r];
    if (label < 0 || label >= classes) {
      *bad_label = 1;
      continue;
    }
    const float* z = logits + int64_t{r} * classes;
    float* p = probs + int64_t{r} * classes;
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
    loss[r] = static_cast<float>(log_denom - static_cast<double>(z[label] - zmax));
    correct[r] = argmax == label ? 1.0f : 0.0f;
  }
}

__global__ void SoftmaxCrossEntropyBackwardKernel(int rows, int classes, const float* probs,
                                                  const int32_t* labels, float scale,
                                                  float* dlogits, int* bad_label) {
  const int64_t n = int64_t{rows} * classes;
  for (int64_t i = FirstGridElement(); i < n; i += GridElementStride()) {
    const int r = static_cast<int>(i / classes);
    const int j = static_cast<int>(i % classes);
    const int label = labels[r];
    if (label < 0 || label >= classes) {
      *bad_label = 1;
      continue;
    }
    dlogits[i] = scale * (probs[i] - (j == label ? 1.0f : 0.0f));
  }
}

// One block of kThreads: strided partial sums in double, then a tree in shared memory.
__global__ void SumKernel(int64_t n, const float* x, double* out) {
  __shared__ double partial[kThreads];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = partial[0];
}

// One thread per element of cols (rows, patch), patch = kernel * kernel * channels.
__global__ void Im2ColKernel(int batch, int height, int width, int channels, int kernel,
                             const float* x, float* cols) {
  const int out_h = height - kernel + 1;
  const int out_w = width - kernel + 1;
  const int64_t patch = int64_t{kernel} * kernel * channels;
  const int64_t n = int64_t{batch} * out_h * out_w * patch;
  for (int64_t i = FirstGridElement(); i < n; i += GridElementStride()) {
    const int64_t row = i / patch;
    const int p = static_cast<int>(i % patch);
    const int ow = static_cast<int>(row % out_w);
    const int oh = static_cast<int>((row / out_w) % out_h);
    const int64_t img = row / (int64_t{out_w} * out_h);
    const int c = p % channels;
    const int kw = (p / channels) % kernel;
    const int kh = p / (channels * kernel);
    cols[i] = x[((img * height + oh + kh) * width + ow + kw) * channels + c];
  }
}

// One thread per element of dx (batch, height, width, channels).
__global__ void Col2ImKernel(int batch, int height, int width, int channels, int kernel,
                             const float* dcols, float* dx) {
  const int out_h = height - kernel + 1;
  const int out_w = width - kernel + 1;
  const int64_t patch = int64_t{kernel} * kernel * channels;
  const int64_t n = int64_t{batch} * height * width * channels;
  for (int64_t i = FirstGridElement(); i < n; i += GridElementStride()) {
    const int c = static_cast<int>(i % channels);
    const int xw = static_cast<int>((i / channels) % width);
    const int xh = static_cast<int>((i / (int64_t{channels} * width)) % height);
    const int64_t img = i / (int64_t{channels} * width * height);
    float sum = 0.0f;
    for (int kh = 0; kh < kernel; ++kh) {
      const int oh = xh - kh;
      if (oh < 0 || oh >= out_h) continue;
      for (int kw = 0; kw < kernel; ++kw) {
        const int ow = xw - kw;
        if (ow < 0 || ow >= out_w) continue;
        const int64_t row = (img * out_h + oh) * out_w + ow;
        sum += dcols[row * patch + (int64_t{kh} * kernel + kw) * channels + c];
      }
    }
    dx[i] = sum;
  }
}

// One thread per element of y (batch, height/pool, width/pool, channels).
__global__ void MaxPoolForwardKernel(int batch, int height, int width, int channels, int pool,
                                     const float* x, float* y, int32_t* argmax) {
  const int out_h = height / pool;
  const int out_w = width / pool;
  const int64_t n = int64_t{batch} * out_h * out_w * channels;
  for (int64_t i = FirstGridElement(); i < n; i += GridElementStride()) {
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
    y[i] = x[best];
    argmax[i] = static_cast<int32_t>(best);
  }
}

__global__ void MaxPoolScatterKernel(int64_t n, const float* dy, const int32_t* argmax, float* dx) {
  for (int64_t i = FirstGridElement(); i < n; i += GridElementStride()) {
    dx[argmax[i]] = dy[i];
  }
}

// One thread per element of y (batch, width + fields * dim).
__global__ void EmbeddingConcatForwardKernel(int batch, int width, const float* x, int fields,
                                             int dim, const float* rows, const int32_t* lookups,
                                             float* y) {
  const int64_t out_width = width + int64_t{fields} * dim;
  const int64_t n = int64_t{batch} * out_width;
  for (int64_t i = FirstGridElement(); i < n; i += GridElementStride()) {
    const int64_t b = i / out_width;
    const int64_t c = i % out_width;
    if (c < width) {
      y[i] = x[b * width + c];
    } else {
      const int64_t f = (c - width) / dim;
      y[i] = rows[int64_t{lookups[b * fields + f]} * dim + (c - width) % dim];
    }
  }
}

__global__ void CopyColumnsKernel(int batch, int width, int64_t from_width, const float* from,
                                  float* to) {
  const int64_t n = int64_t{batch} * width;
  for (int64_t i = FirstGridElement(); i < n; i += GridElementStride()) {
    to[i] = from[(i / width) * from_width + i % width];
  }
}

// One thread per element of row_grads (unique, dim): it adds its row's lookups in their order,
// as the CPU does (no atomics, the same sums on every run).
__global__ void EmbeddingRowGradKernel(int width, const float* dy, int fields, int dim,
                                       int64_t unique, const int32_t* offsets,
                                       const int32_t* positions, float* row_grads) {
  const int64_t out_width = width + int64_t{fields} * dim;
  const int64_t n = unique * dim;
  for (int64_t i = FirstGridElement(); i < n; i += GridElementStride()) {
    const int64_t u = i / dim;
    const int d = static_cast<int>(i % dim);
    float sum = 0.0f;
    for (int32_t k = offsets[u]; k < offsets[u + 1]; ++k) {
      const int64_t b = positions[k] / fields;
      const int64_t f = positions[k] % fields;
      sum += dy[b * out_width + width + f * dim + d];
    }
    row_grads[i] = sum;
  }
}

// Pair index of (hi, lo), hi > lo, in the order i = 1..n-1, j = 0..i-1.
__device__ int64_t PairIndex(int hi, int lo) { return int64_t{hi} * (hi - 1) / 2 + lo; }

// One thread per element of y (batch, dim + n * (n - 1) / 2).
__global__ void DotInteractionForwardKernel(int batch, int n, int dim, const float* x, float* y) {
  const int64_t pairs = int64_t{n} * (n - 1) / 2;
  const int64_t out_width = dim + pairs;
  const int64_t total = int64_t{batch} * out_width;
  for (int64_t i = FirstGridElement(); i < total; i += GridElementStride()) {
    const int64_t b = i / out_width;
    const int64_t c = i % out_width;
    const float* v = x + b * n * dim;
    if (c < dim) {
      y[i] = v[c];
      continue;
    }
    const int64_t k = c - dim;
    int hi = 1;
    while (PairIndex(hi + 1, 0) <= k) ++hi;
    const int lo = static_cast<int>(k - PairIndex(hi, 0));
    float dot = 0.0f;
    for (int d = 0; d < dim; ++d) dot += v[int64_t{hi} * dim + d] * v[int64_t{lo} * dim + d];
    y[i] = dot;
  }
}

// One thread per element of dx (batch, n * dim), summing in the CPU's order.
__global__ void DotInteractionBackwardKernel(int batch, int n, int dim, const float* x,
                                             const float* dy, float* dx) {
  const int64_t out_width = dim + int64_t{n} * (n - 1) / 2;
  const int64_t total = int64_t{batch} * n * dim;
  for (int64_t e = FirstGridElement(); e < total; e += GridElementStride()) {
    const int64_t b = e / (int64_t{n} * dim);
    const int i = static_cast<int>((e / dim) % n);
    const int d = static_cast<int>(e % dim);
    const float* v = x + b * n * dim;
    const float* g = dy + b * out_width;
    float sum = i == 0 ? g[d] : 0.0f;
    for (int j = 0; j < n; ++j) {
      if (j == i) continue;
      sum += g[dim + PairIndex(max(i, j), min(i, j))] * v[int64_t{j} * dim + d];
    }
    dx[e] = sum;
  }
}

// One thread per row.
__global__ void LogisticLossKernel(int rows, const float* logits, const int32_t* labels,
                                   float* probs, float* loss_per_row, float* correct_per_row,
                                   int* bad_label) {
  for (int64_t r = FirstGridElement(); r < rows; r += GridElementStride()) {
    const int32_t label = labels[r];
    if (label != 0 && label != 1) {
      *bad_label = 1;
      continue;
    }
    const double z = logits[r];
    probs[r] = static_cast<float>(1.0 / (1.0 + exp(-z)));
    loss_per_row[r] = static_cast<float>(fmax(z, 0.0) + log1p(exp(-fabs(z))) - z * label);
    correct_per_row[r] = (z > 0) == (label == 1) ? 1.0f : 0.0f;
  }
}

__global__ void LogisticLossBackwardKernel(int rows, const float* probs, const int32_t* labels,
                                           float scale, float* dlogits, int* bad_label) {
  for (int64_t r = FirstGridElement(); r < rows; r += GridElementStride()) {
    const int32_t label = labels[r];
    if (label != 0 && label != 1) *bad_label = 1;
    dlogits[r] = scale * (probs[r] - static_cast<float>(label));
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Launchers.

cudaError_t LaunchFill(float value, int64_t n, float* x, cudaStream_t stream) {
  return Launch(FillKernel, BlocksFor(n), stream, value, n, x);
}

cudaError_t LaunchAddBias(int rows, int cols, const float* bias, float* x, cudaStream_t stream) {
  return Launch(AddBiasKernel, BlocksFor(int64_t{rows} * cols), stream, rows, cols, bias, x);
}

cudaError_t LaunchSumRows(int rows, int cols, const float* x, float beta, float* out,
                          cudaStream_t stream) {
  return Launch(SumRowsKernel, BlocksFor(cols), stream, rows, cols, x, beta, out);
}

cudaError_t LaunchReluForward(int64_t n, const float* x, float* y, cudaStream_t stream) {
  return Launch(ReluForwardKernel, BlocksFor(n), stream, n, x, y);
}

cudaError_t LaunchReluBackward(int64_t n, const float* y, const float* dy, float* dx,
                               cudaStream_t stream) {
  return Launch(ReluBackwardKernel, BlocksFor(n), stream, n, y, dy, dx);
}

cudaError_t LaunchSoftmaxCrossEntropy(int rows, int classes, const float* logits,
                                      const int32_t* labels, float* probs, float* loss_per_row,
                                      float* correct_per_row, int* bad_label, cudaStream_t stream) {
  return Launch(SoftmaxCrossEntropyKernel, BlocksFor(rows), stream, rows, classes, logits, labels,
                probs, loss_per_row, correct_per_row, bad_label);
}

cudaError_t LaunchSoftmaxCrossEntropyBackward(int rows, int classes, const float* probs,
                                              const int32_t* labels, float scale, float* dlogits,
                                              int* bad_label, cudaStream_t stream) {
  return Launch(SoftmaxCrossEntropyBackwardKernel, BlocksFor(int64_t{rows} * classes), stream, rows,
                classes, probs, labels, scale, dlogits, bad_label);
}

cudaError_t LaunchSum(int64_t n, const float* x, double* out, cudaStream_t stream) {
  return Launch(SumKernel, 1, stream, n, x, out);
}

cudaError_t LaunchIm2Col(int batch, int height, int width, int channels, int kernel, const float* x,
                         float* cols, cudaStream_t stream) {
  const int64_t n =
      int64_t{batch} * (height - kernel + 1) * (width - kernel + 1) * kernel * kernel * channels;
  return Launch(Im2ColKernel, BlocksFor(n), stream, batch, height, width, channels, kernel, x,
                cols);
}

cudaError_t LaunchCol2Im(int batch, int height, int width, int channels, int kernel,
                         const float* dcols, float* dx, cudaStream_t stream) {
  const int64_t n = int64_t{batch} * height * width * channels;
  return Launch(Col2ImKernel, BlocksFor(n), stream, batch, height, width, channels, kernel, dcols,
                dx);
}

cudaError_t LaunchMaxPoolForward(int batch, int height, int width, int channels, int pool,
                                 const float* x, float* y, int32_t* argmax, cudaStream_t stream) {
  const int64_t n = int64_t{batch} * (height / pool) * (width / pool) * channels;
  return Launch(MaxPoolForwardKernel, BlocksFor(n), stream, batch, height, width, channels, pool, x,
                y, argmax);
}

cudaError_t LaunchMaxPoolScatter(int64_t y_size, const float* dy, const int32_t* argmax, float* dx,
                                 cudaStream_t stream) {
  return Launch(MaxPoolScatterKernel, BlocksFor(y_size), stream, y_size, dy, argmax, dx);
}

cudaError_t LaunchEmbeddingConcatForward(int batch, int width, const float* x, int fields, int dim,
                                         const float* rows, const int32_t* lookups, float* y,
                                         cudaStream_t stream) {
  const int64_t n = int64_t{batch} * (width + int64_t{fields} * dim);
  return Launch(EmbeddingConcatForwardKernel, BlocksFor(n), stream, batch, width, x, fields, dim,
                rows, lookups, y);
}

cudaError_t LaunchEmbeddingConcatBackward(int batch, int width, const float* dy, int fields,
                                          int dim, int64_t unique, const int32_t* offsets,
                                          const int32_t* positions, float* dx, float* row_grads,
                                          cudaStream_t stream) {
  if (dx != nullptr && width > 0) {
    CopyColumnsKernel<<<BlocksFor(int64_t{batch} * width), kThreads, 0, stream>>>(
        batch, width, width + int64_t{fields} * dim, dy, dx);
  }
  return Launch(EmbeddingRowGradKernel, BlocksFor(unique * dim), stream, width, dy, fields, dim,
                unique, offsets, positions, row_grads);
}

cudaError_t LaunchDotInteractionForward(int batch, int n, int dim, const float* x, float* y,
                                        cudaStream_t stream) {
  const int64_t total = int64_t{batch} * (dim + int64_t{n} * (n - 1) / 2);
  return Launch(DotInteractionForwardKernel, BlocksFor(total), stream, batch, n, dim, x, y);
}

cudaError_t LaunchDotInteractionBackward(int batch, int n, int dim, const float* x, const float* dy,
                                         float* dx, cudaStream_t stream) {
  const int64_t total = int64_t{batch} * n * dim;
  return Launch(DotInteractionBackwardKernel, BlocksFor(total), stream, batch, n, dim, x, dy, dx);
}

cudaError_t LaunchLogisticLoss(int rows, const float* logits, const int32_t* labels, float* probs,
                               float* loss_per_row, float* correct_per_row, int* bad_label,
                               cudaStream_t stream) {
  return Launch(LogisticLossKernel, BlocksFor(rows), stream, rows, logits, labels, probs,
                loss_per_row, correct_per_row, bad_label);
}

cudaError_t LaunchLogisticLossBackward(int rows, const float* probs, const int32_t* labels,
                                       float scale, float* dlogits, int* bad_label,
                                       cudaStream_t stream) {
  return Launch(LogisticLossBackwardKernel, BlocksFor(rows), stream, rows, probs, labels, scale,
                dlogits, bad_label);
}

}  // namespace ps::cuda
