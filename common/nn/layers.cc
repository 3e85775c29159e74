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

absl::Status Linear::Forward(Device& dev, const ForwardPass& pass) {
  const int rows = static_cast<int>(pass.batch * positions_);
  RETURN_IF_ERROR(dev.Gemm(false, false, rows, out_, in_, 1.0f, pass.x, pass.params, 0.0f, pass.y));
  if (!bias_) return absl::OkStatus();
  return dev.AddBias(rows, out_, pass.params + in_ * out_, pass.y);
}

absl::Status Linear::Backward(Device& dev, const BackwardPass& pass) {
  const int rows = static_cast<int>(pass.batch * positions_);
  // dW (in, out) = beta dW + x^T (in, rows) dy (rows, out); db = beta db + column sums of dy.
  RETURN_IF_ERROR(
      dev.Gemm(true, false, in_, out_, rows, 1.0f, pass.x, pass.dy, pass.grads_beta, pass.grads));
  if (bias_)
    RETURN_IF_ERROR(dev.SumRows(rows, out_, pass.dy, pass.grads_beta, pass.grads + in_ * out_));
  if (pass.dx == nullptr) return absl::OkStatus();
  // dx (rows, in) = dy (rows, out) W^T (out, in).
  return dev.Gemm(false, true, rows, in_, out_, 1.0f, pass.dy, pass.params, 0.0f, pass.dx);
}

absl::Status Relu::Forward(Device& dev, const ForwardPass& pass) {
  return dev.ReluForward(static_cast<int64_t>(pass.batch) * size_, pass.x, pass.y);
}

absl::Status Relu::Backward(Device& dev, const BackwardPass& pass) {
  if (pass.dx == nullptr) return absl::OkStatus();
  return dev.ReluBackward(static_cast<int64_t>(pass.batch) * size_, pass.y, pass.dy, pass.dx);
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

absl::Status Conv2d::Forward(Device& dev, const ForwardPass& pass) {
  const int rows = pass.batch * out_h_ * out_w_;
  float* cols = cols_.as<float>();
  RETURN_IF_ERROR(dev.Im2Col(pass.batch, height_, width_, in_, kernel_, pass.x, cols));
  RETURN_IF_ERROR(
      dev.Gemm(false, false, rows, out_, patch_, 1.0f, cols, pass.params, 0.0f, pass.y));
  return dev.AddBias(rows, out_, pass.params + patch_ * out_, pass.y);
}

absl::Status Conv2d::Backward(Device& dev, const BackwardPass& pass) {
  const int rows = pass.batch * out_h_ * out_w_;
  float* cols = cols_.as<float>();
  // dW (patch, out) = beta dW + cols^T (patch, rows) dy (rows, out); db likewise.
  RETURN_IF_ERROR(
      dev.Gemm(true, false, patch_, out_, rows, 1.0f, cols, pass.dy, pass.grads_beta, pass.grads));
  RETURN_IF_ERROR(dev.SumRows(rows, out_, pass.dy, pass.grads_beta, pass.grads + patch_ * out_));
  if (pass.dx == nullptr) return absl::OkStatus();
  // dcols (rows, patch) = dy (rows, out) W^T (out, patch), written over the forward's cols,
  // which are no longer needed; then scattered back onto the image.
  RETURN_IF_ERROR(
      dev.Gemm(false, true, rows, patch_, out_, 1.0f, pass.dy, pass.params, 0.0f, cols));
  return dev.Col2Im(pass.batch, height_, width_, in_, kernel_, cols, pass.dx);
}

absl::Status MaxPool2d::Prepare(Device& dev, int max_batch) {
  if (pool_ < 1 || height_ % pool_ != 0 || width_ % pool_ != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max pool ", pool_, " does not divide ", height_, "x", width_));
  }
  ASSIGN_OR_RETURN(argmax_, dev.Allocate(sizeof(int32_t) * max_batch * output_size()));
  return absl::OkStatus();
}

absl::Status MaxPool2d::Forward(Device& dev, const ForwardPass& pass) {
  return dev.MaxPoolForward(pass.batch, height_, width_, channels_, pool_, pass.x, pass.y,
                            argmax_.as<int32_t>());
}

absl::Status MaxPool2d::Backward(Device& dev, const BackwardPass& pass) {
  if (pass.dx == nullptr) return absl::OkStatus();
  return dev.MaxPoolBackward(int64_t{pass.batch} * output_size(), pass.dy, argmax_.as<int32_t>(),
                             int64_t{pass.batch} * input_size(), pass.dx);
}

absl::Status EmbeddingConcat::CheckBound() const {
  if (batch_ != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("table '", table_.name, "': no sparse rows bound for this pass"));
}

absl::Status EmbeddingConcat::Forward(Device& dev, const ForwardPass& pass) {
  RETURN_IF_ERROR(CheckBound());
  return dev.EmbeddingConcatForward(pass.batch, static_cast<int>(width_), pass.x, fields_,
                                    static_cast<int>(table_.dim), batch_->rows, batch_->lookups,
                                    pass.y);
}

absl::Status EmbeddingConcat::Backward(Device& dev, const BackwardPass& pass) {
  RETURN_IF_ERROR(CheckBound());
  return dev.EmbeddingConcatBackward(pass.batch, static_cast<int>(width_), pass.dy, fields_,
                                     static_cast<int>(table_.dim), batch_->unique, batch_->offsets,
                                     batch_->positions, pass.dx, batch_->row_grads);
}

absl::Status DotInteraction::Forward(Device& dev, const ForwardPass& pass) {
  return dev.DotInteractionForward(pass.batch, n_, dim_, pass.x, pass.y);
}

absl::Status DotInteraction::Backward(Device& dev, const BackwardPass& pass) {
  if (pass.dx == nullptr) return absl::OkStatus();  // the first layer: nothing below to feed
  return dev.DotInteractionBackward(pass.batch, n_, dim_, pass.x, pass.dy, pass.dx);
}

}  // namespace ps
