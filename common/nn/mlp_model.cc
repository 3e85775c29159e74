// The MLP; registered in model_registry.cc.

#include "common/base/status_macros.h"
#include "common/nn/model_registry.h"

namespace ps {

absl::StatusOr<std::unique_ptr<Model>> MakeMlp(int64_t input_size,
                                               const std::vector<int64_t>& hidden, int64_t classes,
                                               Device& device, int max_batch) {
  std::vector<std::unique_ptr<Layer>> layers;
  RETURN_IF_ERROR(AppendClassifierHead(input_size, hidden, classes, &layers));
  return Model::Create("mlp", std::move(layers), device, max_batch);
}

absl::StatusOr<std::unique_ptr<Model>> BuildMlp(const ModelSpec& spec, const SampleShape& sample,
                                                Device& device, int max_batch) {
  const std::vector<int64_t> hidden =
      spec.hidden.empty() ? std::vector<int64_t>{256, 128} : spec.hidden;
  return MakeMlp(sample.features, hidden, sample.num_classes, device, max_batch);
}

}  // namespace ps
