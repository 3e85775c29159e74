#include <cfloat>

#include "common/device/cuda/grid.cuh"
#include "common/device/cuda/kernels.cuh"
#include "common/device/element_kernels.h"

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

// logits, probs (rows, classes); one thread per row.
__global__ void SoftmaxCrossEntropyKernel(int rows, int classes, const float* logits,
                                          const int32_t* labels, float* probs, float* loss,
                                          float* correct, int* bad_label) {
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += blockDim.x * gridDim.x) {
    const int label = labels[r];
    if (label < 0 || label >= classes) {
      *bad_label = 1;
      continue;
    }
    const element::RowLoss row = element::SoftmaxCrossEntropyRow(
        classes, logits + int64_t{r} * classes, label, probs + int64_t{r} * classes);
    loss[r] = row.loss;
    correct[r] = row.correct;
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

// out[i] = element(i) for every i < n, one thread per element: the indexing ops, with `element` a
// __device__ lambda over their functions in element_kernels.h.
template <typename T, typename Element>
__global__ void GenerateKernel(int64_t n, T* out, Element element) {
  for (int64_t i = FirstGridElement(); i < n; i += GridElementStride()) out[i] = element(i);
}

template <typename T, typename Element>
cudaError_t LaunchGenerate(int64_t n, T* out, cudaStream_t stream, Element element) {
  GenerateKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, out, element);
  return cudaGetLastError();
}

// Max pooling writes two outputs, the maximum and where it came from: its own kernel.
__global__ void MaxPoolForwardKernel(int64_t n, int height, int width, int channels, int pool,
                                     const float* x, float* y, int32_t* argmax) {
  for (int64_t i = FirstGridElement(); i < n; i += GridElementStride()) {
    const int64_t best = element::MaxPoolArgmax(height, width, channels, pool, x, i);
    y[i] = x[best];
    argmax[i] = static_cast<int32_t>(best);
  }
}

__global__ void MaxPoolScatterKernel(int64_t n, const float* dy, const int32_t* argmax, float* dx) {
  for (int64_t i = FirstGridElement(); i < n; i += GridElementStride()) {
    dx[argmax[i]] = dy[i];
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
    const element::RowLoss row = element::LogisticRow(logits[r], label, &probs[r]);
    loss_per_row[r] = row.loss;
    correct_per_row[r] = row.correct;
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
  const ValidConvShape shape = ValidConvShapeFor(height, width, channels, kernel);
  const int64_t n = int64_t{batch} * shape.out_h * shape.out_w * shape.patch_len;
  return LaunchGenerate(n, cols, stream, [=] __device__(int64_t i) {
    return element::Im2Col(height, width, channels, kernel, x, i);
  });
}

cudaError_t LaunchCol2Im(int batch, int height, int width, int channels, int kernel,
                         const float* dcols, float* dx, cudaStream_t stream) {
  const int64_t n = int64_t{batch} * height * width * channels;
  return LaunchGenerate(n, dx, stream, [=] __device__(int64_t i) {
    return element::Col2Im(height, width, channels, kernel, dcols, i);
  });
}

cudaError_t LaunchMaxPoolForward(int batch, int height, int width, int channels, int pool,
                                 const float* x, float* y, int32_t* argmax, cudaStream_t stream) {
  const int64_t n = int64_t{batch} * (height / pool) * (width / pool) * channels;
  return Launch(MaxPoolForwardKernel, BlocksFor(n), stream, n, height, width, channels, pool, x, y,
                argmax);
}

cudaError_t LaunchMaxPoolScatter(int64_t y_size, const float* dy, const int32_t* argmax, float* dx,
                                 cudaStream_t stream) {
  return Launch(MaxPoolScatterKernel, BlocksFor(y_size), stream, y_size, dy, argmax, dx);
}

cudaError_t LaunchEmbeddingConcatForward(int batch, int width, const float* x, int fields, int dim,
                                         const float* rows, const int32_t* lookups, float* y,
                                         cudaStream_t stream) {
  const int64_t n = int64_t{batch} * (width + int64_t{fields} * dim);
  return LaunchGenerate(n, y, stream, [=] __device__(int64_t i) {
    return element::EmbeddingConcat(width, x, fields, dim, rows, lookups, i);
  });
}

cudaError_t LaunchEmbeddingConcatBackward(int batch, int width, const float* dy, int fields,
                                          int dim, int64_t unique, const int32_t* offsets,
                                          const int32_t* positions, float* dx, float* row_grads,
                                          cudaStream_t stream) {
  if (dx != nullptr && width > 0) {  // the dense columns pass through
    const int64_t dy_width = width + int64_t{fields} * dim;
    const cudaError_t error = LaunchGenerate(
        int64_t{batch} * width, dx, stream,
        [=] __device__(int64_t i) { return dy[(i / width) * dy_width + i % width]; });
    if (error != cudaSuccess) return error;
  }
  // Each row gradient adds its lookups in their order, as the CPU does: no atomics, the same
  // sums on every run.
  return LaunchGenerate(unique * dim, row_grads, stream, [=] __device__(int64_t i) {
    return element::EmbeddingRowGrad(width, dy, fields, dim, offsets, positions, i);
  });
}

cudaError_t LaunchDotInteractionForward(int batch, int n, int dim, const float* x, float* y,
                                        cudaStream_t stream) {
  const int64_t total = int64_t{batch} * (dim + int64_t{n} * (n - 1) / 2);
  return LaunchGenerate(total, y, stream, [=] __device__(int64_t i) {
    return element::DotInteraction(n, dim, x, i);
  });
}

cudaError_t LaunchDotInteractionBackward(int batch, int n, int dim, const float* x, const float* dy,
                                         float* dx, cudaStream_t stream) {
  const int64_t total = int64_t{batch} * n * dim;
  return LaunchGenerate(total, dx, stream, [=] __device__(int64_t i) {
    return element::DotInteractionGrad(n, dim, x, dy, i);
  });
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
