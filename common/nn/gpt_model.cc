// A GPT-style character language model (GPT-2's architecture at small sizes, as nanoGPT's);
// registered in model_registry.cc.

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/nn/model_registry.h"
#include "common/nn/transformer_layers.h"

namespace ps {

absl::StatusOr<std::unique_ptr<Model>> MakeGpt(int vocab, int context, int layers, int heads,
                                               int dim, Device& device, int max_batch) {
  if (vocab < 2 || context < 1 || layers < 1 || heads < 1 || dim < 1 || dim % heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpt needs a vocabulary of >= 2 tokens, a context, layers and heads >= 1 and a width "
        "that the heads divide; got vocabulary ",
        vocab, ", context ", context, ", ", layers, " layers, ", heads, " heads, width ", dim));
  }
  std::vector<std::unique_ptr<Layer>> net;
  net.push_back(std::make_unique<TokenPositionEmbedding>(vocab, context, dim));
  for (int l = 0; l < layers; ++l) {
    net.push_back(
        std::make_unique<TransformerBlock>(absl::StrCat("h", l), context, dim, heads, layers));
  }
  net.push_back(std::make_unique<LayerNorm>("ln_f", context, dim));
  net.push_back(std::make_unique<Linear>("lm_head", dim, vocab, context, /*bias=*/false));
  return Model::Create("gpt", std::move(net), device, max_batch, Loss::kSoftmaxCrossEntropy,
                       context);
}

absl::StatusOr<std::unique_ptr<Model>> BuildGpt(const ModelSpec& spec, const SampleShape& sample,
                                                Device& device, int max_batch) {
  if (sample.labels < 2 || sample.features != sample.labels) {
    return absl::InvalidArgumentError(
        "--model gpt needs windows of text with a label per position (--data text:FILE "
        "--context N)");
  }
  return MakeGpt(sample.num_classes, static_cast<int>(sample.features), spec.layers, spec.heads,
                 spec.dim, device, max_batch);
}

}  // namespace ps
