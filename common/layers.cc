#include "common/layers.h"

#include <cmath>

#include "common/status_macros.h"

namespace ps {

std::vector<TensorSpec> Linear::ParamSpecs() const {
  return {{name_ + ".weight", {in_, out_}}, {name_ + ".bias", {out_}}};
}

void Linear::InitParams(Rng& rng, float* params) const {
  const float bound = 1.0f / std::sqrt(static_cast<float>(in_));
  for (int64_t i = 0; i < in_ * out_ + out_; ++i) params[i] = rng.Uniform(-bound, bound);
}

absl::Status Linear::Forward(Device& dev, const float* params, const float* x, int batch,
                             float* y) {
  const float* w = params;
  const float* b = params + in_ * out_;
  RETURN_IF_ERROR(dev.Gemm(false, false, batch, out_, in_, 1.0f, x, w, 0.0f, y));
  return dev.AddBias(batch, out_, b, y);
}

absl::Status Linear::Backward(Device& dev, const float* params, const float* x, const float*,
                              const float* dy, int batch, float* dx, float* grads) {
  float* dw = grads;
  float* db = grads + in_ * out_;
  // dW (in, out) += x^T (in, batch) dy (batch, out); db += column sums of dy.
  RETURN_IF_ERROR(dev.Gemm(true, false, in_, out_, batch, 1.0f, x, dy, 1.0f, dw));
  RETURN_IF_ERROR(dev.SumRows(batch, out_, dy, 1.0f, db));
  if (dx == nullptr) return absl::OkStatus();
  // dx (batch, in) = dy (batch, out) W^T (out, in).
  return dev.Gemm(false, true, batch, in_, out_, 1.0f, dy, params, 0.0f, dx);
}

absl::Status Relu::Forward(Device& dev, const float*, const float* x, int batch, float* y) {
  return dev.ReluForward(static_cast<int64_t>(batch) * size_, x, y);
}

absl::Status Relu::Backward(Device& dev, const float*, const float*, const float* y,
                            const float* dy, int batch, float* dx, float*) {
  if (dx == nullptr) return absl::OkStatus();
  return dev.ReluBackward(static_cast<int64_t>(batch) * size_, y, dy, dx);
}

}  // namespace ps
