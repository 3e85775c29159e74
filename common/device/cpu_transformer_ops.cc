// CpuDevice's transformer ops (device.h states their contracts): the reference the CUDA kernels
// and PyTorch are checked against. Loops run with the innermost index over contiguous memory.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/device/cpu_device.h"

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

}  // namespace

absl::Status CpuDevice::Axpy(int64_t n, float alpha, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
  return absl::OkStatus();
}

absl::Status CpuDevice::LayerNormForward(int rows, int dim, const float* x, const float* gamma,
                                         const float* beta, float* y, float* mean, float* rstd) {
  for (int r = 0; r < rows; ++r) {
    const float* in = x + int64_t{r} * dim;
    float* out = y + int64_t{r} * dim;
    double sum = 0;
    for (int d = 0; d < dim; ++d) sum += in[d];
    const float m = static_cast<float>(sum / dim);
    double squares = 0;
    for (int d = 0; d < dim; ++d) squares += static_cast<double>(in[d] - m) * (in[d] - m);
    const float s = 1.0f / std::sqrt(static_cast<float>(squares / dim) + kLayerNormEpsilon);
    for (int d = 0; d < dim; ++d) out[d] = (in[d] - m) * s * gamma[d] + beta[d];
    mean[r] = m;
    rstd[r] = s;
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::LayerNormBackward(int rows, int dim, const float* x, const float* gamma,
                                          const float* mean, const float* rstd, const float* dy,
                                          float* dx, float* dgamma, float* dbeta,
                                          float grads_beta) {
  ScaleOrZero(dim, grads_beta, dgamma);
  ScaleOrZero(dim, grads_beta, dbeta);
  std::vector<float> xhat(dim), dxhat(dim);
  for (int r = 0; r < rows; ++r) {
    const float* in = x + int64_t{r} * dim;
    const float* g = dy + int64_t{r} * dim;
    double mean_dxhat = 0, mean_dxhat_xhat = 0;
    for (int d = 0; d < dim; ++d) {
      xhat[d] = (in[d] - mean[r]) * rstd[r];
      dxhat[d] = g[d] * gamma[d];
      mean_dxhat += dxhat[d];
      mean_dxhat_xhat += static_cast<double>(dxhat[d]) * xhat[d];
      dgamma[d] += g[d] * xhat[d];
      dbeta[d] += g[d];
    }
    const float a = static_cast<float>(mean_dxhat / dim);
    const float b = static_cast<float>(mean_dxhat_xhat / dim);
    float* out = dx + int64_t{r} * dim;
    for (int d = 0; d < dim; ++d) out[d] = rstd[r] * (dxhat[d] - a - xhat[d] * b);
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::GeluForward(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + VectorTanh(kGeluScale * (v + kGeluCubic * v * v * v)));
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::GeluBackward(int64_t n, const float* x, const float* dy, float* dx) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float th = VectorTanh(kGeluScale * (v + kGeluCubic * v * v * v));
    const float slope = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * kGeluScale *
                                                 (1.0f + 3.0f * kGeluCubic * v * v);
    dx[i] = dy[i] * slope;
  }
  return absl::OkStatus();
}

namespace {

// Head h's keys (or values, `which` 1 or 2) of one sequence, transposed: out[d * t + j] =
// component d of position j's. The dot products over d then run as loops over j, which vectorise
// and add in the same order (d ascending) as a dot product would.
void TransposeHead(const float* rows, int t, int64_t c, int h, int head_dim, int which,
                   float* out) {
  for (int j = 0; j < t; ++j) {
    const float* src = rows + int64_t{j} * 3 * c + which * c + int64_t{h} * head_dim;
    for (int d = 0; d < head_dim; ++d) out[int64_t{d} * t + j] = src[d];
  }
}

// dots[j] = sum over d of a[d] * columns[d * t + j], for j < n (d ascending).
void DotsAgainstColumns(const float* a, const float* columns, int t, int head_dim, int n,
                        float* dots) {
  std::fill(dots, dots + n, 0.0f);
  for (int d = 0; d < head_dim; ++d) {
    const float ad = a[d];
    const float* column = columns + int64_t{d} * t;
    for (int j = 0; j < n; ++j) dots[j] += ad * column[j];
  }
}

}  // namespace

absl::Status CpuDevice::CausalAttentionForward(int batch, int t, int heads, int head_dim,
                                               const float* qkv, float* att, float* out) {
  const int64_t c = int64_t{heads} * head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<float> keys(static_cast<size_t>(head_dim) * t);
  for (int b = 0; b < batch; ++b) {
    const float* rows = qkv + int64_t{b} * t * 3 * c;
    for (int h = 0; h < heads; ++h) {
      TransposeHead(rows, t, c, h, head_dim, /*which=*/1, keys.data());
      float* weights = att + (int64_t{b} * heads + h) * t * t;
      for (int i = 0; i < t; ++i) {
        const float* q = rows + int64_t{i} * 3 * c + int64_t{h} * head_dim;
        float* w = weights + int64_t{i} * t;
        DotsAgainstColumns(q, keys.data(), t, head_dim, i + 1, w);
        float top = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          w[j] *= scale;
          top = std::max(top, w[j]);
        }
        float total = 0.0f;
        for (int j = 0; j <= i; ++j) {
          w[j] = std::exp(w[j] - top);
          total += w[j];
        }
        const float inv = 1.0f / total;
        for (int j = 0; j <= i; ++j) w[j] *= inv;
        std::fill(w + i + 1, w + t, 0.0f);
        float* o = out + (int64_t{b} * t + i) * c + int64_t{h} * head_dim;
        std::fill(o, o + head_dim, 0.0f);
        for (int j = 0; j <= i; ++j) {
          const float* v = rows + int64_t{j} * 3 * c + 2 * c + int64_t{h} * head_dim;
          for (int d = 0; d < head_dim; ++d) o[d] += w[j] * v[d];
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::CausalAttentionBackward(int batch, int t, int heads, int head_dim,
                                                const float* qkv, const float* att,
                                                const float* dout, float* dqkv) {
  const int64_t c = int64_t{heads} * head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::fill(dqkv, dqkv + int64_t{batch} * t * 3 * c, 0.0f);
  std::vector<float> dw(t), values(static_cast<size_t>(head_dim) * t);
  for (int b = 0; b < batch; ++b) {
    const float* rows = qkv + int64_t{b} * t * 3 * c;
    float* drows = dqkv + int64_t{b} * t * 3 * c;
    for (int h = 0; h < heads; ++h) {
      TransposeHead(rows, t, c, h, head_dim, /*which=*/2, values.data());
      const float* weights = att + (int64_t{b} * heads + h) * t * t;
      for (int i = 0; i < t; ++i) {
        const float* w = weights + int64_t{i} * t;
        const float* g = dout + (int64_t{b} * t + i) * c + int64_t{h} * head_dim;
        // Through the weighted sum: d weight j = g . v_j; d v_j += w_j g.
        DotsAgainstColumns(g, values.data(), t, head_dim, i + 1, dw.data());
        float weighted = 0.0f;  // sum_j w_j * dw_j, for the softmax's gradient
        for (int j = 0; j <= i; ++j) {
          float* dv = drows + int64_t{j} * 3 * c + 2 * c + int64_t{h} * head_dim;
          for (int d = 0; d < head_dim; ++d) dv[d] += w[j] * g[d];
          weighted += w[j] * dw[j];
        }
        // Through the softmax and the scaled dot products.
        const float* q = rows + int64_t{i} * 3 * c + int64_t{h} * head_dim;
        float* dq = drows + int64_t{i} * 3 * c + int64_t{h} * head_dim;
        for (int j = 0; j <= i; ++j) {
          const float ds = w[j] * (dw[j] - weighted) * scale;
          const float* k = rows + int64_t{j} * 3 * c + c + int64_t{h} * head_dim;
          float* dk = drows + int64_t{j} * 3 * c + c + int64_t{h} * head_dim;
          for (int d = 0; d < head_dim; ++d) {
            dq[d] += ds * k[d];
            dk[d] += ds * q[d];
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::TokenEmbeddingForward(int batch, int t, int dim, int vocab,
                                              const float* ids, const float* wte, const float* wpe,
                                              float* y) {
  for (int64_t r = 0; r < int64_t{batch} * t; ++r) {
    const int id = static_cast<int>(ids[r]);
    if (id < 0 || id >= vocab || static_cast<float>(id) != ids[r]) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", ids[r], " at row ", r, " is not in [0, ", vocab, ")"));
    }
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
    const int id = static_cast<int>(ids[r]);
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", ids[r], " at row ", r, " is not in [0, ", vocab, ")"));
    }
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
