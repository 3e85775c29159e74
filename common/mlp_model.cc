// The MLP; registered in model_registry.cc.

#include "absl/strings/str_cat.h"
#include "common/layers.h"
#include "common/model_registry.h"

namespace ps {

absl::StatusOr<std::unique_ptr<Model>> MakeMlp(int64_t input_size,
                                               const std::vector<int64_t>& hidden, int64_t classes,
                                               Device& device, int max_batch) {
  std::vector<std::unique_ptr<Layer>> layers;
  int64_t width = input_size;
  int index = 1;
  for (int64_t h : hidden) {
    if (h <= 0) return absl::InvalidArgumentError(absl::StrCat("hidden size ", h, " <= 0"));
    layers.push_back(std::make_unique<Linear>(absl::StrCat("fc", index++), width, h));
    layers.push_back(std::make_unique<Relu>(h));
    width = h;
  }
  layers.push_back(std::make_unique<Linear>(absl::StrCat("fc", index), width, classes));
  return Model::Create("mlp", std::move(layers), device, max_batch);
}

absl::StatusOr<std::unique_ptr<Model>> BuildMlp(const ModelSpec& spec, const SampleShape& sample,
                                                Device& device, int max_batch) {
  const std::vector<int64_t> hidden =
      spec.hidden.empty() ? std::vector<int64_t>{256, 128} : spec.hidden;
  return MakeMlp(sample.features, hidden, sample.num_classes, device, max_batch);
}

}  // namespace ps
