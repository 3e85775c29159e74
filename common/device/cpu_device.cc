#include "common/device/cpu_device.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/device/cpu_clones.h"

namespace ps {

namespace {

absl::Status CheckLabel(int32_t label, int row, int classes) {
  if (label >= 0 && label < classes) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("label ", label, " of row ", row, " is outside [0, ", classes, ")"));
}

// The bias and its gradient's loops, cloned per instruction set (cpu_clones.h).
PS_CPU_CLONES void AddBiasLoops(int rows, int cols, const float* bias, float* x) {
  for (int r = 0; r < rows; ++r) {
    float* row = x + static_cast<int64_t>(r) * cols;
    for (int j = 0; j < cols; ++j) row[j] += bias[j];
  }
}

PS_CPU_CLONES void SumRowsLoops(int rows, int cols, const float* x, float beta, float* out) {
  // beta 0: `out` is not read (BLAS's convention), so whatever it held (NaN too) is gone.
  for (int j = 0; j < cols; ++j) out[j] = beta == 0.0f ? 0.0f : out[j] * beta;
  for (int r = 0; r < rows; ++r) {
    const float* row = x + static_cast<int64_t>(r) * cols;
    for (int j = 0; j < cols; ++j) out[j] += row[j];
  }
}

}  // namespace

CpuDevice::CpuDevice(int blas_threads) { openblas_set_num_threads(std::max(1, blas_threads)); }

std::string CpuDevice::BlasKernels() { return openblas_get_corename(); }

absl::StatusOr<DeviceBuffer> CpuDevice::Allocate(size_t bytes) {
  // 64-byte alignment keeps BLAS and vector loops on whole cache lines.
  const size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes (", bytes >> 30, " GiB)"));
  }
  std::memset(p, 0, rounded);
  return DeviceBuffer(p, bytes, [](void* q) { std::free(q); });
}

absl::Status CpuDevice::CopyToDevice(const void* host, size_t bytes, void* device) {
  if (bytes > 0) std::memcpy(device, host, bytes);
  return absl::OkStatus();
}

absl::Status CpuDevice::CopyToHost(const void* device, size_t bytes, void* host) {
  if (bytes > 0) std::memcpy(host, device, bytes);
  return absl::OkStatus();
}

absl::Status CpuDevice::Fill(float value, int64_t n, float* x) {
  std::fill(x, x + n, value);
  return absl::OkStatus();
}

absl::Status CpuDevice::Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                             const float* a, const float* b, float beta, float* c) {
  ASSIGN_OR_RETURN(const GemmPlan plan, PlanGemm(trans_a, trans_b, m, n, k));
  if (!plan.has_work) return absl::OkStatus();
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, plan.lda, b, plan.ldb, beta,
              c, plan.ldc);
  return absl::OkStatus();
}

absl::Status CpuDevice::AddBias(int rows, int cols, const float* bias, float* x) {
  AddBiasLoops(rows, cols, bias, x);
  return absl::OkStatus();
}

absl::Status CpuDevice::SumRows(int rows, int cols, const float* x, float beta, float* out) {
  SumRowsLoops(rows, cols, x, beta, out);
  return absl::OkStatus();
}

absl::Status CpuDevice::ReluForward(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  return absl::OkStatus();
}

absl::Status CpuDevice::ReluBackward(int64_t n, const float* y, const float* dy, float* dx) {
  // dy is read whatever y holds: a load under the condition would keep the loop from vectorising.
  for (int64_t i = 0; i < n; ++i) {
    const float g = dy[i];
    dx[i] = y[i] > 0.0f ? g : 0.0f;
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::SoftmaxCrossEntropy(int rows, int classes, const float* logits,
                                            const int32_t* labels, float* probs,
                                            float* loss_per_row, float* correct_per_row) {
  for (int r = 0; r < rows; ++r) {
    const int32_t label = labels[r];
    RETURN_IF_ERROR(CheckLabel(label, r, classes));
    const element::RowLoss row = element::SoftmaxCrossEntropyRow(
        classes, logits + int64_t{r} * classes, label, probs + int64_t{r} * classes);
    loss_per_row[r] = row.loss;
    correct_per_row[r] = row.correct;
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::SoftmaxCrossEntropyBackward(int rows, int classes, const float* probs,
                                                    const int32_t* labels, float scale,
                                                    float* dlogits) {
  for (int r = 0; r < rows; ++r) {
    const int32_t label = labels[r];
    RETURN_IF_ERROR(CheckLabel(label, r, classes));
    const float* p = probs + static_cast<int64_t>(r) * classes;
    float* d = dlogits + static_cast<int64_t>(r) * classes;
    for (int j = 0; j < classes; ++j) d[j] = scale * (p[j] - (j == label ? 1.0f : 0.0f));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> CpuDevice::Sum(int64_t n, const float* x) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

namespace {

// Calls visit(image_at, row_at) for each kernel row of each patch of a valid convolution: the
// kernel * channels floats at offset image_at of the images (NHWC) are those at offset row_at
// of the im2col rows, one row per output pixel in (n, oh, ow) order.
template <typename Visit>
void ForEachPatchSpan(int batch, int height, int width, int channels, int kernel,
                      const ValidConvShape& shape, Visit visit) {
  const int64_t span = int64_t{kernel} * channels;  // one kernel row of a patch is contiguous
  for (int n = 0; n < batch; ++n) {
    const int64_t image_at = int64_t{n} * height * width * channels;
    for (int oh = 0; oh < shape.out_h; ++oh) {
      for (int ow = 0; ow < shape.out_w; ++ow) {
        const int64_t row_at =
            ((int64_t{n} * shape.out_h + oh) * shape.out_w + ow) * shape.patch_len;
        for (int kh = 0; kh < kernel; ++kh) {
          visit(image_at + ((int64_t{oh} + kh) * width + ow) * channels, row_at + kh * span);
        }
      }
    }
  }
}

}  // namespace

absl::Status CpuDevice::Im2Col(int batch, int height, int width, int channels, int kernel,
                               const float* x, float* cols) {
  ASSIGN_OR_RETURN(const ValidConvShape shape,
                   ValidConvShapeOf(height, width, channels, kernel, "Im2Col"));
  const int64_t span = int64_t{kernel} * channels;
  ForEachPatchSpan(batch, height, width, channels, kernel, shape,
                   [&](int64_t image_at, int64_t row_at) {
                     std::copy(x + image_at, x + image_at + span, cols + row_at);
                   });
  return absl::OkStatus();
}

absl::Status CpuDevice::Col2Im(int batch, int height, int width, int channels, int kernel,
                               const float* dcols, float* dx) {
  ASSIGN_OR_RETURN(const ValidConvShape shape,
                   ValidConvShapeOf(height, width, channels, kernel, "Col2Im"));
  const int64_t span = int64_t{kernel} * channels;
  std::fill(dx, dx + int64_t{batch} * height * width * channels, 0.0f);
  ForEachPatchSpan(batch, height, width, channels, kernel, shape,
                   [&](int64_t image_at, int64_t row_at) {
                     float* dst = dx + image_at;
                     const float* src = dcols + row_at;
                     for (int64_t i = 0; i < span; ++i) dst[i] += src[i];
                   });
  return absl::OkStatus();
}

absl::Status CpuDevice::MaxPoolForward(int batch, int height, int width, int channels, int pool,
                                       const float* x, float* y, int32_t* argmax) {
  if (pool < 1 || height % pool != 0 || width % pool != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("MaxPool: ", height, "x", width, " does not divide by pool ", pool));
  }
  const int out_h = height / pool;
  const int out_w = width / pool;
  for (int n = 0; n < batch; ++n) {
    for (int oh = 0; oh < out_h; ++oh) {
      for (int ow = 0; ow < out_w; ++ow) {
        for (int c = 0; c < channels; ++c) {
          int64_t best = ((int64_t{n} * height + oh * pool) * width + ow * pool) * channels + c;
          for (int ph = 0; ph < pool; ++ph) {
            for (int pw = 0; pw < pool; ++pw) {
              const int64_t i =
                  ((int64_t{n} * height + oh * pool + ph) * width + ow * pool + pw) * channels + c;
              if (x[i] > x[best]) best = i;
            }
          }
          const int64_t o = ((int64_t{n} * out_h + oh) * out_w + ow) * channels + c;
          y[o] = x[best];
          argmax[o] = static_cast<int32_t>(best);
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::MaxPoolBackward(int64_t y_size, const float* dy, const int32_t* argmax,
                                        int64_t x_size, float* dx) {
  std::fill(dx, dx + x_size, 0.0f);
  for (int64_t i = 0; i < y_size; ++i) dx[argmax[i]] = dy[i];
  return absl::OkStatus();
}

absl::Status CpuDevice::EmbeddingConcatForward(int batch, int width, const float* x, int fields,
                                               int dim, const float* rows, const int32_t* lookups,
                                               float* y) {
  const int64_t out_width = width + int64_t{fields} * dim;
  for (int b = 0; b < batch; ++b) {
    float* out = y + b * out_width;
    std::copy(x + int64_t{b} * width, x + int64_t{b + 1} * width, out);
    for (int f = 0; f < fields; ++f) {
      const float* row = rows + int64_t{lookups[int64_t{b} * fields + f]} * dim;
      std::copy(row, row + dim, out + width + int64_t{f} * dim);
    }
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::EmbeddingConcatBackward(int batch, int width, const float* dy, int fields,
                                                int dim, int64_t unique, const int32_t* offsets,
                                                const int32_t* positions, float* dx,
                                                float* row_grads) {
  const int64_t out_width = width + int64_t{fields} * dim;
  if (dx != nullptr) {
    for (int b = 0; b < batch; ++b) {
      std::copy(dy + b * out_width, dy + b * out_width + width, dx + int64_t{b} * width);
    }
  }
  for (int64_t u = 0; u < unique; ++u) {
    float* grad = row_grads + u * dim;
    std::fill(grad, grad + dim, 0.0f);
    for (int32_t k = offsets[u]; k < offsets[u + 1]; ++k) {
      const int64_t b = positions[k] / fields;
      const int64_t f = positions[k] % fields;
      const float* from = dy + b * out_width + width + f * dim;
      for (int d = 0; d < dim; ++d) grad[d] += from[d];
    }
  }
  return absl::OkStatus();
}

namespace {

// The dot interaction's loops, cloned per instruction set. Both sum in the order of the plain
// loops and of the CUDA kernels (each dot product over d ascending, each gradient element over j
// ascending), 16 outputs to a vector: per output the same additions as one at a time, so every
// clone gives the plain loops' bits. Each output's sum is a chain of dependent additions, so
// kRowsAtOnce rows' chains run side by side to fill the adder's pipeline.
constexpr int kRowsAtOnce = 4;

// The first `count` lanes of `lanes` into `out`. A loop over all 16 lanes, not up to `count`: GCC
// turns that one into a call of memcpy, several times slower for so few bytes.
inline void StoreLanes(const Lanes16* lanes, int count, float* out) {
  float buffer[kLanes];
  std::memcpy(buffer, lanes, sizeof(buffer));
  for (int k = 0; k < kLanes; ++k) {
    if (k < count) out[k] = buffer[k];
  }
}

// Forward: sample b's vectors are transposed ([d][j], j padded with zeros to whole blocks of 16);
// the dots of rows i with a block of 16 vectors j < i are accumulated kRowsAtOnce rows at a time.
PS_CPU_CLONES void DotInteractionForwardLoops(int batch, int n, int dim, const float* x, float* y) {
  const int64_t out_width = dim + int64_t{n} * (n - 1) / 2;
  const int64_t padded = int64_t{(n + kLanes - 1) / kLanes} * kLanes;
  std::vector<float> transposed(static_cast<size_t>(dim * padded), 0.0f);
  for (int b = 0; b < batch; ++b) {
    const float* v = x + int64_t{b} * n * dim;
    float* out = y + b * out_width;
    std::copy(v, v + dim, out);
    for (int j = 0; j < n; ++j) {
      for (int d = 0; d < dim; ++d) transposed[d * padded + j] = v[int64_t{j} * dim + d];
    }
    float* dots = out + dim;  // pair (i, j < i) at i (i - 1) / 2 + j
    for (int first = 0; first + 1 < n; first += kLanes) {
      const float* block = transposed.data() + first;
      for (int i = first + 1; i < n; i += kRowsAtOnce) {
        // Rows past the last compute the last one again, unused.
        const float* rows[kRowsAtOnce];
        for (int r = 0; r < kRowsAtOnce; ++r) rows[r] = v + int64_t{std::min(i + r, n - 1)} * dim;
        Lanes16 sums[kRowsAtOnce] = {};
        for (int d = 0; d < dim; ++d) {
          Lanes16 column;
          std::memcpy(&column, block + d * padded, sizeof(column));
          for (int r = 0; r < kRowsAtOnce; ++r) sums[r] += rows[r][d] * column;
        }
        for (int r = 0; r < kRowsAtOnce && i + r < n; ++r) {
          const int row = i + r;
          StoreLanes(&sums[r], std::min(kLanes, row - first),
                     dots + int64_t{row} * (row - 1) / 2 + first);
        }
      }
    }
  }
}

// Backward: vector i's gradient is the pass-through (i = 0) plus its pairs' coefficients times
// the other vectors, j ascending; kRowsAtOnce vectors i at a time, 16 elements of d at a time.
PS_CPU_CLONES void DotInteractionBackwardLoops(int batch, int n, int dim, const float* x,
                                               const float* dy, float* dx) {
  const int64_t out_width = dim + int64_t{n} * (n - 1) / 2;
  std::vector<float> coefficients(static_cast<size_t>(kRowsAtOnce) * n);
  for (int b = 0; b < batch; ++b) {
    const float* v = x + int64_t{b} * n * dim;
    const float* g = dy + b * out_width;
    const float* pairs = g + dim;
    float* dv = dx + int64_t{b} * n * dim;
    for (int i = 0; i < n; i += kRowsAtOnce) {
      // Row i + r's coefficients at r * n + j; rows past the last repeat it, unused. The pairs
      // (row, j < row) are contiguous; (j > row, row) is at j (j - 1) / 2 + row.
      for (int r = 0; r < kRowsAtOnce; ++r) {
        const int row = std::min(i + r, n - 1);
        float* to = coefficients.data() + r * n;
        const float* below = pairs + int64_t{row} * (row - 1) / 2;
        for (int j = 0; j < row; ++j) to[j] = below[j];
        to[row] = 0.0f;
        int64_t at = int64_t{row + 1} * row / 2 + row;
        for (int j = row + 1; j < n; at += j, ++j) to[j] = pairs[at];
      }
      const float* c = coefficients.data();
      int d = 0;
      for (; d + kLanes <= dim; d += kLanes) {
        Lanes16 sums[kRowsAtOnce] = {};
        if (i == 0) std::memcpy(&sums[0], g + d, sizeof(sums[0]));
        for (int j = 0; j < n; ++j) {
          Lanes16 vj;
          std::memcpy(&vj, v + int64_t{j} * dim + d, sizeof(vj));
          for (int r = 0; r < kRowsAtOnce; ++r) {
            if (j != i + r) sums[r] += c[r * n + j] * vj;  // a vector's own pair is skipped
          }
        }
        for (int r = 0; r < kRowsAtOnce && i + r < n; ++r) {
          std::memcpy(dv + int64_t{i + r} * dim + d, &sums[r], sizeof(sums[r]));
        }
      }
      for (; d < dim; ++d) {
        for (int r = 0; r < kRowsAtOnce && i + r < n; ++r) {
          float sum = i + r == 0 ? g[d] : 0.0f;
          for (int j = 0; j < n; ++j) {
            if (j != i + r) sum += c[r * n + j] * v[int64_t{j} * dim + d];
          }
          dv[int64_t{i + r} * dim + d] = sum;
        }
      }
    }
  }
}

}  // namespace

absl::Status CpuDevice::DotInteractionForward(int batch, int n, int dim, const float* x, float* y) {
  DotInteractionForwardLoops(batch, n, dim, x, y);
  return absl::OkStatus();
}

absl::Status CpuDevice::DotInteractionBackward(int batch, int n, int dim, const float* x,
                                               const float* dy, float* dx) {
  DotInteractionBackwardLoops(batch, n, dim, x, dy, dx);
  return absl::OkStatus();
}

absl::Status CpuDevice::LogisticLoss(int rows, const float* logits, const int32_t* labels,
                                     float* probs, float* loss_per_row, float* correct_per_row) {
  for (int r = 0; r < rows; ++r) {
    RETURN_IF_ERROR(CheckLabel(labels[r], r, 2));
    const element::RowLoss row = element::LogisticRow(logits[r], labels[r], &probs[r]);
    loss_per_row[r] = row.loss;
    correct_per_row[r] = row.correct;
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::LogisticLossBackward(int rows, const float* probs, const int32_t* labels,
                                             float scale, float* dlogits) {
  for (int r = 0; r < rows; ++r) {
    RETURN_IF_ERROR(CheckLabel(labels[r], r, 2));
    dlogits[r] = scale * (probs[r] - static_cast<float>(labels[r]));
  }
  return absl::OkStatus();
}

}  // namespace ps
