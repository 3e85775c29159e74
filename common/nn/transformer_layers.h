#ifndef PS_COMMON_NN_TRANSFORMER_LAYERS_H_
#define PS_COMMON_NN_TRANSFORMER_LAYERS_H_

// The layers of a GPT-style language model. A sample is a sequence of `tokens` positions; the
// activations between layers are (batch, tokens * dim), each position's vector contiguous. The
// layers keep the forward pass's intermediate values in their own scratch memory (Prepare), so a
// Backward must follow the Forward of the same batch, as Model::ForwardBackward does.

#include <string>
#include <utility>
#include <vector>

#include "common/nn/layers.h"

namespace ps {

// Token and learned position embeddings: x (batch, tokens) token ids (as floats) -> y (batch,
// tokens * dim) = wte[id] + wpe[position]. Both initialised N(0, 0.02) as GPT-2's. The ids get no
// gradient: it must be the first layer.
class TokenPositionEmbedding final : public Layer {
 public:
  TokenPositionEmbedding(int vocab, int tokens, int dim)
      : vocab_(vocab), tokens_(tokens), dim_(dim) {}
  int64_t input_size() const override { return tokens_; }
  int64_t output_size() const override { return int64_t{tokens_} * dim_; }
  std::vector<TensorSpec> ParamSpecs() const override;
  void InitParams(Rng& rng, float* params) const override;
  absl::Status Forward(Device& dev, const ForwardPass& pass) override;
  absl::Status Backward(Device& dev, const BackwardPass& pass) override;

 private:
  int vocab_, tokens_, dim_;
};

// A named layer whose output has its input's shape, (batch, tokens * dim): the layers between
// the embedding and the head. Its parameters are named after it ("block0.ln1.weight").
class SequenceLayer : public Layer {
 public:
  int64_t input_size() const override { return int64_t{tokens_} * dim_; }
  int64_t output_size() const override { return input_size(); }

 protected:
  SequenceLayer(std::string name, int tokens, int dim)
      : name_(std::move(name)), tokens_(tokens), dim_(dim) {}

  const std::string name_;
  const int tokens_, dim_;
};

// Layer normalisation of each position's vector: gain 1 and bias 0 at start.
class LayerNorm final : public SequenceLayer {
 public:
  LayerNorm(std::string name, int tokens, int dim) : SequenceLayer(std::move(name), tokens, dim) {}
  std::vector<TensorSpec> ParamSpecs() const override;
  void InitParams(Rng& rng, float* params) const override;
  absl::Status Prepare(Device& dev, int max_batch) override;
  absl::Status Forward(Device& dev, const ForwardPass& pass) override;
  absl::Status Backward(Device& dev, const BackwardPass& pass) override;

 private:
  DeviceBuffer mean_, rstd_;  // of the last forward pass, per row
};

// A pre-LayerNorm transformer block (GPT-2's):
//   h = x + proj(attention(ln1(x)))        causal multi-head self-attention, `heads` heads
//   y = h + fc_proj(gelu(fc(ln2(h))))      an MLP 4 x dim wide, tanh-approximated GELU
// Parameters, in this order: ln1.weight, ln1.bias, attn.weight (dim, 3 dim: query, key, value),
// attn.bias, attn_proj.weight (dim, dim), attn_proj.bias, ln2.weight, ln2.bias, fc.weight (dim,
// 4 dim), fc.bias, fc_proj.weight (4 dim, dim), fc_proj.bias; each weight is (in, out) as Linear's.
// Initialised as GPT-2: weights N(0, 0.02), the two projections into the residual stream N(0,
// 0.02 / sqrt(2 layers)), biases 0, LayerNorm gains 1.
class TransformerBlock final : public SequenceLayer {
 public:
  TransformerBlock(std::string name, int tokens, int dim, int heads, int layers);
  std::vector<TensorSpec> ParamSpecs() const override;
  void InitParams(Rng& rng, float* params) const override;
  absl::Status Prepare(Device& dev, int max_batch) override;
  absl::Status Forward(Device& dev, const ForwardPass& pass) override;
  absl::Status Backward(Device& dev, const BackwardPass& pass) override;

 private:
  // Offsets of the parameters in the block's range.
  struct Offsets {
    int64_t ln1_g, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_g, ln2_b, fc_w, fc_b, fc_proj_w,
        fc_proj_b, total;
  };
  Offsets offsets() const;

  int heads_, layers_;
  // The forward pass's values, per row (batch * tokens rows): ln1's output, mean and rstd; the
  // queries, keys and values; the attention weights (heads x tokens per row); the heads'
  // output; h; ln2's output, mean and rstd; the MLP's input to GELU and GELU's output.
  DeviceBuffer ln1_out_, ln1_mean_, ln1_rstd_, qkv_, att_, attn_out_, mid_, ln2_out_, ln2_mean_,
      ln2_rstd_, fc_pre_, fc_act_;
  // Backward scratch: d h, d of a (rows, dim) value, d qkv, d of the MLP's hidden values.
  DeviceBuffer d_mid_, d_row_, d_qkv_, d_hidden_;
};

}  // namespace ps

#endif  // PS_COMMON_NN_TRANSFORMER_LAYERS_H_
