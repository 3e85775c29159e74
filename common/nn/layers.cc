#include "common/nn/layers.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace ps {

std::vector<TensorSpec> Linear::ParamSpecs() const {
  if (!bias_) return {{name_ + ".weight", {in_, out_}}};
  return {{name_ + ".weight", {in_, out_}}, {name_ + ".bias", {out_}}};
}

void Linear::InitParams(Rng& rng, float* params) const {
  const float bound = 1.0f / std::sqrt(static_cast<float>(in_));
  for (int64_t i = 0; i < in_ * out_ + (bias_ ? out_ : 0); ++i) {
    params[i] = rng.Uniform(-bound, bound);
  }
}

absl::Status Linear::Forward(Device& dev, const float* params, const float* x, int batch,
                             float* y) {
  const int rows = static_cast<int>(batch * positions_);
  RETURN_IF_ERROR(dev.Gemm(false, false, rows, out_, in_, 1.0f, x, params, 0.0f, y));
  if (!bias_) return absl::OkStatus();
  return dev.AddBias(rows, out_, params + in_ * out_, y);
}

absl::Status Linear::Backward(Device& dev, const float* params, const float* x, const float*,
                              const float* dy, int batch, float* dx, float* grads,
                              float grads_beta) {
  const int rows = static_cast<int>(batch * positions_);
  // dW (in, out) = beta dW + x^T (in, rows) dy (rows, out); db = beta db + column sums of dy.
  RETURN_IF_ERROR(dev.Gemm(true, false, in_, out_, rows, 1.0f, x, dy, grads_beta, grads));
  if (bias_) RETURN_IF_ERROR(dev.SumRows(rows, out_, dy, grads_beta, grads + in_ * out_));
  if (dx == nullptr) return absl::OkStatus();
  // dx (rows, in) = dy (rows, out) W^T (out, in).
  return dev.Gemm(false, true, rows, in_, out_, 1.0f, dy, params, 0.0f, dx);
}

absl::Status Relu::Forward(Device& dev, const float*, const float* x, int batch, float* y) {
  return dev.ReluForward(static_cast<int64_t>(batch) * size_, x, y);
}

absl::Status Relu::Backward(Device& dev, const float*, const float*, const float* y,
                            const float* dy, int batch, float* dx, float*, float) {
  if (dx == nullptr) return absl::OkStatus();
  return dev.ReluBackward(static_cast<int64_t>(batch) * size_, y, dy, dx);
}

Conv2d::Conv2d(std::string name, int height, int width, int in_channels, int out_channels,
               int kernel)
    : name_(std::move(name)),
      height_(height),
      width_(width),
      in_(in_channels),
      out_(out_channels),
      kernel_(kernel),
      out_h_(height - kernel + 1),
      out_w_(width - kernel + 1),
      patch_(int64_t{kernel} * kernel * in_channels) {}

std::vector<TensorSpec> Conv2d::ParamSpecs() const {
  return {{name_ + ".weight", {kernel_, kernel_, in_, out_}}, {name_ + ".bias", {out_}}};
}

void Conv2d::InitParams(Rng& rng, float* params) const {
  const float bound = 1.0f / std::sqrt(static_cast<float>(patch_));
  for (int64_t i = 0; i < patch_ * out_ + out_; ++i) params[i] = rng.Uniform(-bound, bound);
}

absl::Status Conv2d::Prepare(Device& dev, int max_batch) {
  if (out_h_ < 1 || out_w_ < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": kernel ", kernel_, " exceeds the ", height_, "x", width_, " input"));
  }
  ASSIGN_OR_RETURN(cols_, dev.Allocate(sizeof(float) * max_batch * out_h_ * out_w_ * patch_));
  return absl::OkStatus();
}

absl::Status Conv2d::Forward(Device& dev, const float* params, const float* x, int batch,
                             float* y) {
  const int rows = batch * out_h_ * out_w_;
  float* cols = cols_.as<float>();
  RETURN_IF_ERROR(dev.Im2Col(batch, height_, width_, in_, kernel_, x, cols));
  RETURN_IF_ERROR(dev.Gemm(false, false, rows, out_, patch_, 1.0f, cols, params, 0.0f, y));
  return dev.AddBias(rows, out_, params + patch_ * out_, y);
}

absl::Status Conv2d::Backward(Device& dev, const float* params, const float*, const float*,
                              const float* dy, int batch, float* dx, float* grads,
                              float grads_beta) {
  const int rows = batch * out_h_ * out_w_;
  float* cols = cols_.as<float>();
  // dW (patch, out) = beta dW + cols^T (patch, rows) dy (rows, out); db likewise.
  RETURN_IF_ERROR(dev.Gemm(true, false, patch_, out_, rows, 1.0f, cols, dy, grads_beta, grads));
  RETURN_IF_ERROR(dev.SumRows(rows, out_, dy, grads_beta, grads + patch_ * out_));
  if (dx == nullptr) return absl::OkStatus();
  // dcols (rows, patch) = dy (rows, out) W^T (out, patch), written over the forward's cols,
  // which are no longer needed; then scattered back onto the image.
  RETURN_IF_ERROR(dev.Gemm(false, true, rows, patch_, out_, 1.0f, dy, params, 0.0f, cols));
  return dev.Col2Im(batch, height_, width_, in_, kernel_, cols, dx);
}

absl::Status MaxPool2d::Prepare(Device& dev, int max_batch) {
  if (pool_ < 1 || height_ % pool_ != 0 || width_ % pool_ != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max pool ", pool_, " does not divide ", height_, "x", width_));
  }
  ASSIGN_OR_RETURN(argmax_, dev.Allocate(sizeof(int32_t) * max_batch * output_size()));
  return absl::OkStatus();
}

absl::Status MaxPool2d::Forward(Device& dev, const float*, const float* x, int batch, float* y) {
  return dev.MaxPoolForward(batch, height_, width_, channels_, pool_, x, y, argmax_.as<int32_t>());
}

absl::Status MaxPool2d::Backward(Device& dev, const float*, const float*, const float*,
                                 const float* dy, int batch, float* dx, float*, float) {
  if (dx == nullptr) return absl::OkStatus();
  return dev.MaxPoolBackward(int64_t{batch} * output_size(), dy, argmax_.as<int32_t>(),
                             int64_t{batch} * input_size(), dx);
}

absl::Status EmbeddingConcat::Forward(Device& dev, const float* /*params*/, const float* x,
                                      int batch, float* y) {
  if (batch_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("table '", table_.name, "': no sparse rows bound for this pass"));
  }
  return dev.EmbeddingConcatForward(batch, static_cast<int>(width_), x, fields_,
                                    static_cast<int>(table_.dim), batch_->rows, batch_->lookups, y);
}

absl::Status EmbeddingConcat::Backward(Device& dev, const float* /*params*/, const float* /*x*/,
                                       const float* /*y*/, const float* dy, int batch, float* dx,
                                       float* /*grads*/, float /*grads_beta*/) {
  if (batch_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("table '", table_.name, "': no sparse rows bound for this pass"));
  }
  return dev.EmbeddingConcatBackward(batch, static_cast<int>(width_), dy, fields_,
                                     static_cast<int>(table_.dim), batch_->unique, batch_->offsets,
                                     batch_->positions, dx, batch_->row_grads);
}

absl::Status DotInteraction::Forward(Device& dev, const float* /*params*/, const float* x,
                                     int batch, float* y) {
  return dev.DotInteractionForward(batch, n_, dim_, x, y);
}

absl::Status DotInteraction::Backward(Device& dev, const float* /*params*/, const float* x,
                                      const float* /*y*/, const float* dy, int batch, float* dx,
                                      float* /*grads*/, float /*grads_beta*/) {
  if (dx == nullptr) return absl::OkStatus();  // the first layer: nothing below to feed
  return dev.DotInteractionBackward(batch, n_, dim_, x, dy, dx);
}

}  // namespace ps
