#include "common/nn/model_registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ps {

namespace {

struct RegisteredModel {
  const char* name;
  absl::StatusOr<std::unique_ptr<Model>> (*build)(const ModelSpec& spec, const SampleShape& sample,
                                                  Device& device, int max_batch);
};

// One line per model.
constexpr RegisteredModel kModels[] = {
    {"mlp", &BuildMlp},
    {"cnn", &BuildCnn},
    {"dlrm", &BuildDlrm},
    {"gpt", &BuildGpt},
};

}  // namespace

std::string ModelNames() {
  std::vector<std::string> names;
  for (const RegisteredModel& m : kModels) names.push_back(m.name);
  return absl::StrJoin(names, "|");
}

absl::StatusOr<std::unique_ptr<Model>> MakeModel(const ModelSpec& spec, const SampleShape& sample,
                                                 Device& device, int max_batch) {
  for (const RegisteredModel& m : kModels) {
    if (spec.name == m.name) return m.build(spec, sample, device, max_batch);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model '", spec.name, "' (", ModelNames(), ")"));
}

}  // namespace ps
