#ifndef PS_WORKER_TEXT_GENERATION_H_
#define PS_WORKER_TEXT_GENERATION_H_

// Sampling text from a language model (ps_worker --generate): token by token, each drawn from the
// softmax of the model's logits at the last position of the window it reads.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/device/device.h"
#include "common/nn/model.h"

namespace ps {

struct GenerationOptions {
  int tokens = 0;            // to generate
  double temperature = 1.0;  // logits are divided by it; 0: always the most likely token
  uint64_t seed = 1;         // of the draws: the same seed gives the same text
};

// Continues `prompt` (token ids, not empty) with options.tokens tokens of `model` (a language
// model: a label per position) at `params` (device memory, the model's layout). The model reads
// the last context tokens; a shorter text sits at the window's start, the rest padded with token
// 0, which the causal attention keeps from the positions that matter. The model must have been
// built for batches of at least 1. INVALID_ARGUMENT for an empty prompt, a model with one label
// per sample or a negative temperature.
absl::StatusOr<std::vector<int32_t>> GenerateTokens(Model& model, Device& device,
                                                    const float* params,
                                                    const std::vector<int32_t>& prompt,
                                                    const GenerationOptions& options);

}  // namespace ps

#endif  // PS_WORKER_TEXT_GENERATION_H_
