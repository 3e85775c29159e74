// CpuDevice's transformer ops (device.h states their contracts): the reference the CUDA kernels
// and PyTorch are checked against. Loops run with the innermost index over contiguous memory.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/device/cpu_clones.h"
#include "common/device/cpu_device.h"
#include "common/device/element_kernels.h"

namespace ps {

namespace {

constexpr float kLayerNormEpsilon = 1e-5f;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// e^x for x in [-87, 88] (clamped outside), to about 2 ulp, written so that loops over it
// vectorise (libm's expf and tanhf do not, and took half of a step's time in GELU): x = k ln 2 + r
// with |r| <= ln 2 / 2, e^r by its Taylor polynomial to r^7 (remainder < 2e-9), 2^k by building
// the float's exponent bits.
inline float VectorExp(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  // Round to nearest by adding and removing 1.5 * 2^23 (nearbyint is a libm call on x86-64's
  // baseline, which would keep the loop scalar).
  constexpr float kRound = 12582912.0f;
  const float k = (x * 1.44269504088896341f + kRound) - kRound;
  const float r = (x - k * 0.693145751953125f) - k * 1.42860682030941723e-6f;  // ln 2 in 2 parts
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// tanh(u) = 1 - 2 / (e^{2u} + 1): absolute error about 1e-7 (GELU adds it to 1).
inline float VectorTanh(float u) { return 1.0f - 2.0f / (VectorExp(2.0f * u) + 1.0f); }

// grads = grads_beta * grads, BLAS style: beta 0 writes zeros whatever `grads` held.
void ScaleOrZero(int64_t n, float grads_beta, float* grads) {
  if (grads_beta == 0.0f) {
    std::fill(grads, grads + n, 0.0f);
  } else if (grads_beta != 1.0f) {
    for (int64_t i = 0; i < n; ++i) grads[i] *= grads_beta;
  }
}

// Row reductions in float: 16 partial sums (column d into lane d % 16), added in lane order, then
// the tail; the same order in every clone.
inline float AddLanes(const Lanes16* v) {
  float sum = 0.0f;
  for (int k = 0; k < kLanes; ++k) sum += (*v)[k];
  return sum;
}
// sum over d of (x[d] - shift)^2
inline float SumOfSquares(const float* x, int n, float shift) {
  Lanes16 acc = {};
  int d = 0;
  for (; d + kLanes <= n; d += kLanes) {
    Lanes16 v;
    std::memcpy(&v, x + d, sizeof(v));
    v -= shift;
    acc += v * v;
  }
  float sum = AddLanes(&acc);
  for (; d < n; ++d) sum += (x[d] - shift) * (x[d] - shift);
  return sum;
}
// sum over d of a[d] * b[d], or of a[d] when b is null
inline float Dot(const float* a, const float* b, int n) {
  Lanes16 acc = {};
  int d = 0;
  for (; d + kLanes <= n; d += kLanes) {
    Lanes16 u, v = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f,
                    1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
    std::memcpy(&u, a + d, sizeof(u));
    if (b != nullptr) std::memcpy(&v, b + d, sizeof(v));
    acc += u * v;
  }
  float sum = AddLanes(&acc);
  for (; d < n; ++d) sum += b == nullptr ? a[d] : a[d] * b[d];
  return sum;
}

PS_CPU_CLONES void AxpyLoops(int64_t n, float alpha, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

PS_CPU_CLONES void LayerNormForwardLoops(int rows, int dim, const float* x, const float* gamma,
                                         const float* beta, float* y, float* mean, float* rstd) {
  for (int r = 0; r < rows; ++r) {
    const float* in = x + int64_t{r} * dim;
    float* out = y + int64_t{r} * dim;
    const float m = Dot(in, nullptr, dim) / dim;
    const float s = 1.0f / std::sqrt(SumOfSquares(in, dim, m) / dim + kLayerNormEpsilon);
    for (int d = 0; d < dim; ++d) out[d] = (in[d] - m) * s * gamma[d] + beta[d];
    mean[r] = m;
    rstd[r] = s;
  }
}

PS_CPU_CLONES void LayerNormBackwardLoops(int rows, int dim, const float* x, const float* gamma,
                                          const float* mean, const float* rstd, const float* dy,
                                          float* dx, float* dgamma, float* dbeta,
                                          float grads_beta) {
  ScaleOrZero(dim, grads_beta, dgamma);
  ScaleOrZero(dim, grads_beta, dbeta);
  std::vector<float> xhat(dim), dxhat(dim);
  for (int r = 0; r < rows; ++r) {
    const float* in = x + int64_t{r} * dim;
    const float* g = dy + int64_t{r} * dim;
    const float m = mean[r], s = rstd[r];
    for (int d = 0; d < dim; ++d) {
      xhat[d] = (in[d] - m) * s;
      dxhat[d] = g[d] * gamma[d];
      dgamma[d] += g[d] * xhat[d];
      dbeta[d] += g[d];
    }
    const float a = Dot(dxhat.data(), nullptr, dim) / dim;
    const float b = Dot(dxhat.data(), xhat.data(), dim) / dim;
    float* out = dx + int64_t{r} * dim;
    for (int d = 0; d < dim; ++d) out[d] = s * (dxhat[d] - a - xhat[d] * b);
  }
}

PS_CPU_CLONES void GeluForwardLoops(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + VectorTanh(kGeluScale * (v + kGeluCubic * v * v * v)));
  }
}

PS_CPU_CLONES void GeluBackwardLoops(int64_t n, const float* x, const float* dy, float* dx) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float th = VectorTanh(kGeluScale * (v + kGeluCubic * v * v * v));
    const float slope = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * kGeluScale *
                                                 (1.0f + 3.0f * kGeluCubic * v * v);
    dx[i] = dy[i] * slope;
  }
}

// Rows of a transposed head: t rounded up to whole Lanes16, so a block may read past position
// t - 1 (into zeros) and only the positions asked for are stored.
int PaddedPositions(int t) { return (t + kLanes - 1) / kLanes * kLanes; }

// Head h's keys (or values, `which` 1 or 2) of one sequence, transposed: out[d * stride + j] =
// component d of position j's (stride = PaddedPositions(t), the padding zero), so that dot
// products against every position run as one WeightedRowSum over d.
void TransposeHead(const float* rows, int t, int64_t c, int h, int head_dim, int which,
                   float* out) {
  const int stride = PaddedPositions(t);
  for (int j = 0; j < t; ++j) {
    const float* src = rows + int64_t{j} * 3 * c + which * c + int64_t{h} * head_dim;
    for (int d = 0; d < head_dim; ++d) out[int64_t{d} * stride + j] = src[d];
  }
}

// out[0, len) = the sum over s in [0, count), s ascending, of coef[s * coef_stride] times the
// row rows[s * row_stride + (0, len)]. Every product attention needs is one: a head's output
// (weights times values), dot products against transposed keys (len positions, count head_dim)
// and each gradient. The sums stay in registers, 16 columns at a time, and each column adds its
// terms in s order from zero, as a plain loop would. With `padded`, rows may be read up to len
// rounded up to 16 (a transposed head), so no column is left to the scalar tail.
inline void WeightedRowSum(int count, const float* coef, int64_t coef_stride, const float* rows,
                           int64_t row_stride, int len, float* out, bool padded = false) {
  const int blocked = padded ? PaddedPositions(len) : len / kLanes * kLanes;
  for (int d0 = 0; d0 < blocked; d0 += kLanes) {
    Lanes16 acc = {};
    for (int s = 0; s < count; ++s) {
      Lanes16 row;
      std::memcpy(&row, rows + s * row_stride + d0, sizeof(row));
      acc += coef[s * coef_stride] * row;
    }
    if (d0 + kLanes <= len) {
      std::memcpy(out + d0, &acc, sizeof(acc));
    } else {
      for (int k = 0; d0 + k < len; ++k) out[d0 + k] = acc[k];
    }
  }
  for (int d = blocked; d < len; ++d) {
    float acc = 0.0f;
    for (int s = 0; s < count; ++s) acc += coef[s * coef_stride] * rows[s * row_stride + d];
    out[d] = acc;
  }
}

PS_CPU_CLONES void CausalAttentionForwardLoops(int batch, int t, int heads, int head_dim,
                                               const float* qkv, float* att, float* out) {
  const int64_t c = int64_t{heads} * head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int stride = PaddedPositions(t);
  std::vector<float> keys(static_cast<size_t>(head_dim) * stride);
  for (int b = 0; b < batch; ++b) {
    const float* rows = qkv + int64_t{b} * t * 3 * c;
    for (int h = 0; h < heads; ++h) {
      TransposeHead(rows, t, c, h, head_dim, /*which=*/1, keys.data());
      const float* values = rows + 2 * c + int64_t{h} * head_dim;
      float* weights = att + (int64_t{b} * heads + h) * t * t;
      for (int i = 0; i < t; ++i) {
        const float* q = rows + int64_t{i} * 3 * c + int64_t{h} * head_dim;
        float* w = weights + int64_t{i} * t;
        WeightedRowSum(head_dim, q, 1, keys.data(), stride, i + 1, w, true);  // w[j] = q . k_j
        float top = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          w[j] *= scale;
          top = std::max(top, w[j]);
        }
        for (int j = 0; j <= i; ++j) w[j] = VectorExp(w[j] - top);
        float total = 0.0f;
        for (int j = 0; j <= i; ++j) total += w[j];
        const float inv = 1.0f / total;
        for (int j = 0; j <= i; ++j) w[j] *= inv;
        std::fill(w + i + 1, w + t, 0.0f);
        WeightedRowSum(i + 1, w, 1, values, 3 * c, head_dim,
                       out + (int64_t{b} * t + i) * c + int64_t{h} * head_dim);
      }
    }
  }
}

// Two passes per head: by query i (d weights, the softmax's gradient into `dscores`, dq_i), then
// by key j (dv_j and dk_j, sums over the queries i >= j that saw it). Every element of dqkv is
// written once.
PS_CPU_CLONES void CausalAttentionBackwardLoops(int batch, int t, int heads, int head_dim,
                                                const float* qkv, const float* att,
                                                const float* dout, float* dqkv) {
  const int64_t c = int64_t{heads} * head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int stride = PaddedPositions(t);
  std::vector<float> values(static_cast<size_t>(head_dim) * stride);
  std::vector<float> dscores(static_cast<size_t>(t) * t);
  for (int b = 0; b < batch; ++b) {
    const float* rows = qkv + int64_t{b} * t * 3 * c;
    float* drows = dqkv + int64_t{b} * t * 3 * c;
    for (int h = 0; h < heads; ++h) {
      TransposeHead(rows, t, c, h, head_dim, /*which=*/2, values.data());
      const float* weights = att + (int64_t{b} * heads + h) * t * t;
      const float* queries = rows + int64_t{h} * head_dim;
      const float* keys = queries + c;
      const float* grads = dout + int64_t{b} * t * c + int64_t{h} * head_dim;
      for (int i = 0; i < t; ++i) {
        const float* w = weights + int64_t{i} * t;
        float* ds = dscores.data() + int64_t{i} * t;
        // Through the weighted sum: d weight j = g_i . v_j.
        WeightedRowSum(head_dim, grads + int64_t{i} * c, 1, values.data(), stride, i + 1, ds, true);
        float weighted = 0.0f;  // sum_j w_j * d weight j, for the softmax's gradient
        for (int j = 0; j <= i; ++j) weighted += w[j] * ds[j];
        // Through the softmax and the scale: d score j; then dq_i = sum_j d score j * k_j.
        for (int j = 0; j <= i; ++j) ds[j] = w[j] * (ds[j] - weighted) * scale;
        WeightedRowSum(i + 1, ds, 1, keys, 3 * c, head_dim,
                       drows + int64_t{i} * 3 * c + int64_t{h} * head_dim);
      }
      for (int j = 0; j < t; ++j) {
        // dv_j = sum over i >= j of w_ij g_i; dk_j = sum over i >= j of d score ij * q_i.
        float* drow = drows + int64_t{j} * 3 * c + int64_t{h} * head_dim;
        WeightedRowSum(t - j, weights + int64_t{j} * t + j, t, grads + int64_t{j} * c, c, head_dim,
                       drow + 2 * c);
        WeightedRowSum(t - j, dscores.data() + int64_t{j} * t + j, t, queries + int64_t{j} * 3 * c,
                       3 * c, head_dim, drow + c);
      }
    }
  }
}

// The token id at ids[r]: INVALID_ARGUMENT unless it is an integer in [0, vocab), by the rule the
// GPU's kernels apply too (element::TokenId), in both directions.
absl::StatusOr<int> TokenIdAt(const float* ids, int64_t r, int vocab) {
  const int id = element::TokenId(ids, r, vocab);
  if (id < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("token ", ids[r], " at row ", r, " is not an integer in [0, ", vocab, ")"));
  }
  return id;
}

}  // namespace

absl::Status CpuDevice::Axpy(int64_t n, float alpha, const float* x, float* y) {
  AxpyLoops(n, alpha, x, y);
  return absl::OkStatus();
}

absl::Status CpuDevice::LayerNormForward(int rows, int dim, const float* x, const float* gamma,
                                         const float* beta, float* y, float* mean, float* rstd) {
  LayerNormForwardLoops(rows, dim, x, gamma, beta, y, mean, rstd);
  return absl::OkStatus();
}

absl::Status CpuDevice::LayerNormBackward(int rows, int dim, const float* x, const float* gamma,
                                          const float* mean, const float* rstd, const float* dy,
                                          float* dx, float* dgamma, float* dbeta,
                                          float grads_beta) {
  LayerNormBackwardLoops(rows, dim, x, gamma, mean, rstd, dy, dx, dgamma, dbeta, grads_beta);
  return absl::OkStatus();
}

absl::Status CpuDevice::GeluForward(int64_t n, const float* x, float* y) {
  GeluForwardLoops(n, x, y);
  return absl::OkStatus();
}

absl::Status CpuDevice::GeluBackward(int64_t n, const float* x, const float* dy, float* dx) {
  GeluBackwardLoops(n, x, dy, dx);
  return absl::OkStatus();
}

absl::Status CpuDevice::CausalAttentionForward(int batch, int t, int heads, int head_dim,
                                               const float* qkv, float* att, float* out) {
  CausalAttentionForwardLoops(batch, t, heads, head_dim, qkv, att, out);
  return absl::OkStatus();
}

absl::Status CpuDevice::CausalAttentionBackward(int batch, int t, int heads, int head_dim,
                                                const float* qkv, const float* att,
                                                const float* dout, float* dqkv) {
  CausalAttentionBackwardLoops(batch, t, heads, head_dim, qkv, att, dout, dqkv);
  return absl::OkStatus();
}

absl::Status CpuDevice::TokenEmbeddingForward(int batch, int t, int dim, int vocab,
                                              const float* ids, const float* wte, const float* wpe,
                                              float* y) {
  for (int64_t r = 0; r < int64_t{batch} * t; ++r) {
    ASSIGN_OR_RETURN(const int id, TokenIdAt(ids, r, vocab));
    const float* token = wte + int64_t{id} * dim;
    const float* position = wpe + (r % t) * dim;
    float* out = y + r * dim;
    for (int d = 0; d < dim; ++d) out[d] = token[d] + position[d];
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::TokenEmbeddingBackward(int batch, int t, int dim, int vocab,
                                               const float* ids, const float* dy, float* dwte,
                                               float* dwpe, float grads_beta) {
  ScaleOrZero(int64_t{vocab} * dim, grads_beta, dwte);
  ScaleOrZero(int64_t{t} * dim, grads_beta, dwpe);
  for (int64_t r = 0; r < int64_t{batch} * t; ++r) {
    ASSIGN_OR_RETURN(const int id, TokenIdAt(ids, r, vocab));
    const float* g = dy + r * dim;
    float* token = dwte + int64_t{id} * dim;
    float* position = dwpe + (r % t) * dim;
    for (int d = 0; d < dim; ++d) {
      token[d] += g[d];
      position[d] += g[d];
    }
  }
  return absl::OkStatus();
}

}  // namespace ps
