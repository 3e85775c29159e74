#ifndef PS_COMMON_NN_MODEL_REGISTRY_H_
#define PS_COMMON_NN_MODEL_REGISTRY_H_

// Models by name, as the binaries' --model and --hidden flags give them. A new model is one file
// (its builder) plus one line in model_registry.cc's table; docs/architecture.md walks through
// the CNN's.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/data/dataset.h"
#include "common/device/device.h"
#include "common/nn/model.h"

namespace ps {

struct ModelSpec {
  std::string name = "mlp";     // a registered name (ModelNames())
  std::vector<int64_t> hidden;  // hidden fully connected widths; empty: the model's default
  int64_t embedding_dim = 16;   // models with sparse tables: the rows' width
  // The transformer (gpt): blocks, attention heads per block, and the model's width.
  int layers = 4;
  int heads = 4;
  int dim = 128;
};

// The model `spec` names, built for samples of `sample`'s shape. INVALID_ARGUMENT for an unknown
// name (naming the known ones) or sizes the model cannot take.
absl::StatusOr<std::unique_ptr<Model>> MakeModel(const ModelSpec& spec, const SampleShape& sample,
                                                 Device& device, int max_batch);

// The registered names, "a|b|...".
std::string ModelNames();

// The builders, one file each.

// The MLP (mlp_model.cc): input -> [Linear -> ReLU] per hidden size -> Linear -> classes.
// Tensors are named fc1.weight, fc1.bias, fc2.weight, ...; default hidden widths 256,128.
absl::StatusOr<std::unique_ptr<Model>> MakeMlp(int64_t input_size,
                                               const std::vector<int64_t>& hidden, int64_t classes,
                                               Device& device, int max_batch);
absl::StatusOr<std::unique_ptr<Model>> BuildMlp(const ModelSpec& spec, const SampleShape& sample,
                                                Device& device, int max_batch);

// The CNN (cnn_model.cc): [5x5 convolution (32 channels) -> ReLU -> 2x2 max pool] -> [5x5
// convolution (64 channels) -> ReLU -> 2x2 max pool] -> [Linear -> ReLU] per hidden size ->
// Linear -> classes. On 28x28 images: 24x24x32 -> 12x12x32 -> 8x8x64 -> 4x4x64 = 1024 features.
// Tensors are named conv1.*, conv2.*, fc1.*, ...; default hidden width 128.
absl::StatusOr<std::unique_ptr<Model>> MakeCnn(const ImageShape& input,
                                               const std::vector<int64_t>& hidden, int64_t classes,
                                               Device& device, int max_batch);
absl::StatusOr<std::unique_ptr<Model>> BuildCnn(const ModelSpec& spec, const SampleShape& sample,
                                                Device& device, int max_batch);

// DLRM (dlrm_model.cc), for samples of dense features and `fields` sparse keys each:
// dense -> bottom MLP ([Linear -> ReLU] per width of `bottom`, then Linear -> ReLU to dim)
// -> the dense vector joined by the `fields` rows its keys name in table "embeddings" (dim each)
// -> the dot interaction of those fields + 1 vectors -> top MLP ([Linear -> ReLU] per width of
// `top`) -> Linear -> one logit -> logistic loss. Tensors bottom1.*, bottom2.*, ..., fc1.*, ...
// The table's rows start uniform in [-0.05, 0.05).
absl::StatusOr<std::unique_ptr<Model>> MakeDlrm(int64_t dense_features, int fields, int64_t dim,
                                                const std::vector<int64_t>& bottom,
                                                const std::vector<int64_t>& top, Device& device,
                                                int max_batch);
// Bottom MLP 64 -> --embedding_dim; --hidden the top MLP's widths (default 64).
absl::StatusOr<std::unique_ptr<Model>> BuildDlrm(const ModelSpec& spec, const SampleShape& sample,
                                                 Device& device, int max_batch);

// A GPT-style language model (gpt_model.cc) over windows of `context` tokens of a `vocab`-token
// vocabulary: token and position embeddings -> `layers` pre-LayerNorm transformer blocks
// (causal self-attention with `heads` heads, a 4 x dim GELU MLP) -> a final LayerNorm -> a
// linear head without bias to the vocabulary's logits at every position -> softmax cross
// entropy against the next token. Tensors: wte, wpe, h0.*, h1.*, ..., ln_f.*, lm_head.weight.
absl::StatusOr<std::unique_ptr<Model>> MakeGpt(int vocab, int context, int layers, int heads,
                                               int dim, Device& device, int max_batch);
// For text windows (--data text:FILE): --layers, --heads, --dim; the window is the data's.
absl::StatusOr<std::unique_ptr<Model>> BuildGpt(const ModelSpec& spec, const SampleShape& sample,
                                                Device& device, int max_batch);

}  // namespace ps

#endif  // PS_COMMON_NN_MODEL_REGISTRY_H_
