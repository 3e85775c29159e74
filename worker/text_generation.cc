#include "worker/text_generation.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/base/random.h"
#include "common/base/status_macros.h"

namespace ps {

absl::StatusOr<std::vector<int32_t>> GenerateTokens(Model& model, Device& device,
                                                    const float* params,
                                                    const std::vector<int32_t>& prompt,
                                                    const GenerationOptions& options) {
  const int context = model.labels_per_sample();
  const int vocab = static_cast<int>(model.num_classes());
  if (context < 2 || model.input_size() != context) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", model.name(), " is not a language model"));
  }
  if (prompt.empty()) return absl::InvalidArgumentError("generating needs a prompt");
  if (options.temperature < 0 || options.tokens < 0) {
    return absl::InvalidArgumentError("the temperature and the count must be >= 0");
  }
  for (int32_t id : prompt) {
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("token ", id, " is not in [0, ", vocab, ")"));
    }
  }
  ASSIGN_OR_RETURN(DeviceBuffer x_dev, device.Allocate(sizeof(float) * context));
  ASSIGN_OR_RETURN(DeviceBuffer y_dev, device.Allocate(sizeof(int32_t) * context));  // zeros
  std::vector<int32_t> text = prompt;
  std::vector<float> window(context), logits(vocab);
  Rng rng = Rng::FromKeys({options.seed, 0x67656e});
  for (int n = 0; n < options.tokens; ++n) {
    const int64_t begin = std::max<int64_t>(0, static_cast<int64_t>(text.size()) - context);
    const int used = static_cast<int>(text.size() - begin);
    std::fill(window.begin(), window.end(), 0.0f);
    for (int t = 0; t < used; ++t) window[t] = static_cast<float>(text[begin + t]);
    RETURN_IF_ERROR(device.CopyToDevice(window.data(), sizeof(float) * context, x_dev.as<float>()));
    RETURN_IF_ERROR(model.Evaluate(params, x_dev.as<float>(), y_dev.as<int32_t>(), 1).status());
    RETURN_IF_ERROR(device.CopyToHost(model.logits() + int64_t{used - 1} * vocab,
                                      sizeof(float) * vocab, logits.data()));
    int32_t next =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (options.temperature > 0) {
      // Softmax of logits / temperature, drawn by its cumulative sum.
      const float top = logits[next];
      double total = 0;
      for (float& l : logits) {
        l = static_cast<float>(std::exp((l - top) / options.temperature));
        total += l;
      }
      double draw = rng.NextFloat() * total;
      for (int v = 0; v < vocab; ++v) {
        draw -= logits[v];
        if (draw <= 0) {
          next = v;
          break;
        }
      }
    }
    text.push_back(next);
  }
  return std::vector<int32_t>(text.begin() + static_cast<int64_t>(prompt.size()), text.end());
}

}  // namespace ps
