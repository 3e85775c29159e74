#include "common/nn/transformer_layers.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace ps {

namespace {

constexpr float kInitStd = 0.02f;  // GPT-2's

void FillNormal(Rng& rng, float stddev, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(stddev * StandardNormal(rng));
}

// Zero-filled device memory of `floats` floats.
absl::Status AllocateFloats(Device& dev, int64_t floats, DeviceBuffer* out) {
  ASSIGN_OR_RETURN(*out, dev.Allocate(static_cast<size_t>(floats) * sizeof(float)));
  return absl::OkStatus();
}

// y = x, through the device's ops.
absl::Status CopyOnDevice(Device& dev, int64_t n, const float* x, float* y) {
  RETURN_IF_ERROR(dev.Fill(0.0f, n, y));
  return dev.Axpy(n, 1.0f, x, y);
}

}  // namespace

// TokenPositionEmbedding.

std::vector<TensorSpec> TokenPositionEmbedding::ParamSpecs() const {
  return {{"wte", {vocab_, dim_}}, {"wpe", {tokens_, dim_}}};
}

void TokenPositionEmbedding::InitParams(Rng& rng, float* params) const {
  FillNormal(rng, kInitStd, (int64_t{vocab_} + tokens_) * dim_, params);
}

absl::Status TokenPositionEmbedding::Forward(Device& dev, const ForwardPass& pass) {
  return dev.TokenEmbeddingForward(pass.batch, tokens_, dim_, vocab_, pass.x, pass.params,
                                   pass.params + int64_t{vocab_} * dim_, pass.y);
}

absl::Status TokenPositionEmbedding::Backward(Device& dev, const BackwardPass& pass) {
  if (pass.dx != nullptr) {
    return absl::FailedPreconditionError("token ids have no gradient: embed as the first layer");
  }
  return dev.TokenEmbeddingBackward(pass.batch, tokens_, dim_, vocab_, pass.x, pass.dy, pass.grads,
                                    pass.grads + int64_t{vocab_} * dim_, pass.grads_beta);
}

// LayerNorm.

std::vector<TensorSpec> LayerNorm::ParamSpecs() const {
  return {{name_ + ".weight", {dim_}}, {name_ + ".bias", {dim_}}};
}

void LayerNorm::InitParams(Rng&, float* params) const {
  std::fill(params, params + dim_, 1.0f);
  std::fill(params + dim_, params + 2 * dim_, 0.0f);
}

absl::Status LayerNorm::Prepare(Device& dev, int max_batch) {
  RETURN_IF_ERROR(AllocateFloats(dev, int64_t{max_batch} * tokens_, &mean_));
  return AllocateFloats(dev, int64_t{max_batch} * tokens_, &rstd_);
}

absl::Status LayerNorm::Forward(Device& dev, const ForwardPass& pass) {
  return dev.LayerNormForward(pass.batch * tokens_, dim_, pass.x, pass.params, pass.params + dim_,
                              pass.y, mean_.as<float>(), rstd_.as<float>());
}

absl::Status LayerNorm::Backward(Device& dev, const BackwardPass& pass) {
  if (pass.dx == nullptr) {
    return absl::InvalidArgumentError("LayerNorm needs an input gradient buffer");
  }
  return dev.LayerNormBackward(pass.batch * tokens_, dim_, pass.x, pass.params, mean_.as<float>(),
                               rstd_.as<float>(), pass.dy, pass.dx, pass.grads, pass.grads + dim_,
                               pass.grads_beta);
}

// TransformerBlock.

TransformerBlock::TransformerBlock(std::string name, int tokens, int dim, int heads, int layers)
    : SequenceLayer(std::move(name), tokens, dim), heads_(heads), layers_(layers) {}

TransformerBlock::Offsets TransformerBlock::offsets() const {
  const int64_t c = dim_;
  Offsets o;
  o.ln1_g = 0;
  o.ln1_b = o.ln1_g + c;
  o.attn_w = o.ln1_b + c;
  o.attn_b = o.attn_w + c * 3 * c;
  o.proj_w = o.attn_b + 3 * c;
  o.proj_b = o.proj_w + c * c;
  o.ln2_g = o.proj_b + c;
  o.ln2_b = o.ln2_g + c;
  o.fc_w = o.ln2_b + c;
  o.fc_b = o.fc_w + c * 4 * c;
  o.fc_proj_w = o.fc_b + 4 * c;
  o.fc_proj_b = o.fc_proj_w + 4 * c * c;
  o.total = o.fc_proj_b + c;
  return o;
}

std::vector<TensorSpec> TransformerBlock::ParamSpecs() const {
  const int64_t c = dim_;
  const std::string& n = name_;
  return {{n + ".ln1.weight", {c}},
          {n + ".ln1.bias", {c}},
          {n + ".attn.weight", {c, 3 * c}},
          {n + ".attn.bias", {3 * c}},
          {n + ".attn_proj.weight", {c, c}},
          {n + ".attn_proj.bias", {c}},
          {n + ".ln2.weight", {c}},
          {n + ".ln2.bias", {c}},
          {n + ".fc.weight", {c, 4 * c}},
          {n + ".fc.bias", {4 * c}},
          {n + ".fc_proj.weight", {4 * c, c}},
          {n + ".fc_proj.bias", {c}}};
}

void TransformerBlock::InitParams(Rng& rng, float* params) const {
  const Offsets o = offsets();
  const int64_t c = dim_;
  std::fill(params, params + o.total, 0.0f);
  std::fill(params + o.ln1_g, params + o.ln1_g + c, 1.0f);
  std::fill(params + o.ln2_g, params + o.ln2_g + c, 1.0f);
  const float residual_std = kInitStd / std::sqrt(2.0f * static_cast<float>(layers_));
  FillNormal(rng, kInitStd, c * 3 * c, params + o.attn_w);
  FillNormal(rng, residual_std, c * c, params + o.proj_w);
  FillNormal(rng, kInitStd, c * 4 * c, params + o.fc_w);
  FillNormal(rng, residual_std, 4 * c * c, params + o.fc_proj_w);
}

absl::Status TransformerBlock::Prepare(Device& dev, int max_batch) {
  if (heads_ < 1 || dim_ % heads_ != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim ", dim_, " is not a multiple of the ", heads_, " heads"));
  }
  const int64_t rows = int64_t{max_batch} * tokens_, c = dim_;
  for (auto [buffer, width] :
       std::initializer_list<std::pair<DeviceBuffer*, int64_t>>{{&ln1_out_, c},
                                                                {&ln1_mean_, 1},
                                                                {&ln1_rstd_, 1},
                                                                {&qkv_, 3 * c},
                                                                {&att_, int64_t{heads_} * tokens_},
                                                                {&attn_out_, c},
                                                                {&mid_, c},
                                                                {&ln2_out_, c},
                                                                {&ln2_mean_, 1},
                                                                {&ln2_rstd_, 1},
                                                                {&fc_pre_, 4 * c},
                                                                {&fc_act_, 4 * c},
                                                                {&d_mid_, c},
                                                                {&d_row_, c},
                                                                {&d_qkv_, 3 * c},
                                                                {&d_hidden_, 4 * c}}) {
    RETURN_IF_ERROR(AllocateFloats(dev, rows * width, buffer));
  }
  return absl::OkStatus();
}

absl::Status TransformerBlock::Forward(Device& dev, const ForwardPass& pass) {
  const Offsets o = offsets();
  const int rows = pass.batch * tokens_, c = dim_;
  const int64_t n = int64_t{rows} * c;
  const float* p = pass.params;
  // The attention half: h = x + proj(attention(ln1(x))).
  RETURN_IF_ERROR(dev.LayerNormForward(rows, c, pass.x, p + o.ln1_g, p + o.ln1_b,
                                       ln1_out_.as<float>(), ln1_mean_.as<float>(),
                                       ln1_rstd_.as<float>()));
  RETURN_IF_ERROR(dev.Gemm(false, false, rows, 3 * c, c, 1.0f, ln1_out_.as<float>(), p + o.attn_w,
                           0.0f, qkv_.as<float>()));
  RETURN_IF_ERROR(dev.AddBias(rows, 3 * c, p + o.attn_b, qkv_.as<float>()));
  RETURN_IF_ERROR(dev.CausalAttentionForward(pass.batch, tokens_, heads_, c / heads_,
                                             qkv_.as<float>(), att_.as<float>(),
                                             attn_out_.as<float>()));
  float* mid = mid_.as<float>();
  RETURN_IF_ERROR(
      dev.Gemm(false, false, rows, c, c, 1.0f, attn_out_.as<float>(), p + o.proj_w, 0.0f, mid));
  RETURN_IF_ERROR(dev.AddBias(rows, c, p + o.proj_b, mid));
  RETURN_IF_ERROR(dev.Axpy(n, 1.0f, pass.x, mid));
  // The MLP half: y = h + fc_proj(gelu(fc(ln2(h)))).
  RETURN_IF_ERROR(dev.LayerNormForward(rows, c, mid, p + o.ln2_g, p + o.ln2_b, ln2_out_.as<float>(),
                                       ln2_mean_.as<float>(), ln2_rstd_.as<float>()));
  RETURN_IF_ERROR(dev.Gemm(false, false, rows, 4 * c, c, 1.0f, ln2_out_.as<float>(), p + o.fc_w,
                           0.0f, fc_pre_.as<float>()));
  RETURN_IF_ERROR(dev.AddBias(rows, 4 * c, p + o.fc_b, fc_pre_.as<float>()));
  RETURN_IF_ERROR(dev.GeluForward(int64_t{rows} * 4 * c, fc_pre_.as<float>(), fc_act_.as<float>()));
  RETURN_IF_ERROR(dev.Gemm(false, false, rows, c, 4 * c, 1.0f, fc_act_.as<float>(), p + o.fc_proj_w,
                           0.0f, pass.y));
  RETURN_IF_ERROR(dev.AddBias(rows, c, p + o.fc_proj_b, pass.y));
  return dev.Axpy(n, 1.0f, mid, pass.y);
}

absl::Status TransformerBlock::Backward(Device& dev, const BackwardPass& pass) {
  if (pass.dx == nullptr) {
    return absl::InvalidArgumentError("a transformer block needs an input gradient buffer");
  }
  const Offsets o = offsets();
  const int rows = pass.batch * tokens_, c = dim_;
  const int64_t n = int64_t{rows} * c;
  const float* p = pass.params;
  float* g = pass.grads;
  const float beta = pass.grads_beta;
  float* d_mid = d_mid_.as<float>();
  float* d_row = d_row_.as<float>();
  float* d_hidden = d_hidden_.as<float>();
  float* d_qkv = d_qkv_.as<float>();
  // The MLP half. d h starts as dy (the residual), then gets ln2's path.
  RETURN_IF_ERROR(CopyOnDevice(dev, n, pass.dy, d_mid));
  RETURN_IF_ERROR(dev.Gemm(true, false, 4 * c, c, rows, 1.0f, fc_act_.as<float>(), pass.dy, beta,
                           g + o.fc_proj_w));
  RETURN_IF_ERROR(dev.SumRows(rows, c, pass.dy, beta, g + o.fc_proj_b));
  RETURN_IF_ERROR(
      dev.Gemm(false, true, rows, 4 * c, c, 1.0f, pass.dy, p + o.fc_proj_w, 0.0f, d_hidden));
  RETURN_IF_ERROR(dev.GeluBackward(int64_t{rows} * 4 * c, fc_pre_.as<float>(), d_hidden, d_hidden));
  RETURN_IF_ERROR(dev.Gemm(true, false, c, 4 * c, rows, 1.0f, ln2_out_.as<float>(), d_hidden, beta,
                           g + o.fc_w));
  RETURN_IF_ERROR(dev.SumRows(rows, 4 * c, d_hidden, beta, g + o.fc_b));
  RETURN_IF_ERROR(dev.Gemm(false, true, rows, c, 4 * c, 1.0f, d_hidden, p + o.fc_w, 0.0f, d_row));
  // d_row is d ln2's output; ln2's gradient goes to dx for now (free until the end), then into h.
  RETURN_IF_ERROR(dev.LayerNormBackward(rows, c, mid_.as<float>(), p + o.ln2_g,
                                        ln2_mean_.as<float>(), ln2_rstd_.as<float>(), d_row,
                                        pass.dx, g + o.ln2_g, g + o.ln2_b, beta));
  RETURN_IF_ERROR(dev.Axpy(n, 1.0f, pass.dx, d_mid));
  // The attention half. dx starts as d h (the residual), then gets ln1's path.
  RETURN_IF_ERROR(
      dev.Gemm(true, false, c, c, rows, 1.0f, attn_out_.as<float>(), d_mid, beta, g + o.proj_w));
  RETURN_IF_ERROR(dev.SumRows(rows, c, d_mid, beta, g + o.proj_b));
  RETURN_IF_ERROR(dev.Gemm(false, true, rows, c, c, 1.0f, d_mid, p + o.proj_w, 0.0f, d_row));
  RETURN_IF_ERROR(dev.CausalAttentionBackward(pass.batch, tokens_, heads_, c / heads_,
                                              qkv_.as<float>(), att_.as<float>(), d_row, d_qkv));
  RETURN_IF_ERROR(
      dev.Gemm(true, false, c, 3 * c, rows, 1.0f, ln1_out_.as<float>(), d_qkv, beta, g + o.attn_w));
  RETURN_IF_ERROR(dev.SumRows(rows, 3 * c, d_qkv, beta, g + o.attn_b));
  RETURN_IF_ERROR(dev.Gemm(false, true, rows, c, 3 * c, 1.0f, d_qkv, p + o.attn_w, 0.0f, d_row));
  RETURN_IF_ERROR(dev.LayerNormBackward(rows, c, pass.x, p + o.ln1_g, ln1_mean_.as<float>(),
                                        ln1_rstd_.as<float>(), d_row, pass.dx, g + o.ln1_g,
                                        g + o.ln1_b, beta));
  return dev.Axpy(n, 1.0f, d_mid, pass.dx);
}

}  // namespace ps
