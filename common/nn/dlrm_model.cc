// DLRM (Naumov et al., 2019) with a dot interaction; registered in model_registry.cc.

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/nn/model_registry.h"

namespace ps {

namespace {

constexpr float kEmbeddingInitScale = 0.05f;

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> MakeDlrm(int64_t dense_features, int fields, int64_t dim,
                                                const std::vector<int64_t>& bottom,
                                                const std::vector<int64_t>& top, Device& device,
                                                int max_batch) {
  if (dense_features < 1 || fields < 1 || dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat("dlrm needs dense features, sparse fields and ",
                                                   "an embedding width >= 1; got ", dense_features,
                                                   ", ", fields, ", ", dim));
  }
  std::vector<std::unique_ptr<Layer>> layers;
  int64_t width = dense_features;
  std::vector<int64_t> bottom_widths = bottom;
  bottom_widths.push_back(dim);
  for (size_t i = 0; i < bottom_widths.size(); ++i) {
    if (bottom_widths[i] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("bottom width ", bottom_widths[i], " <= 0"));
    }
    layers.push_back(
        std::make_unique<Linear>(absl::StrCat("bottom", i + 1), width, bottom_widths[i]));
    layers.push_back(std::make_unique<Relu>(bottom_widths[i]));
    width = bottom_widths[i];
  }
  layers.push_back(std::make_unique<EmbeddingConcat>(
      SparseTableSpec{"embeddings", dim, kEmbeddingInitScale}, dim, fields));
  layers.push_back(std::make_unique<DotInteraction>(fields + 1, static_cast<int>(dim)));
  RETURN_IF_ERROR(AppendClassifierHead(layers.back()->output_size(), top, 1, &layers));
  return Model::Create("dlrm", std::move(layers), device, max_batch, Loss::kLogistic);
}

absl::StatusOr<std::unique_ptr<Model>> BuildDlrm(const ModelSpec& spec, const SampleShape& sample,
                                                 Device& device, int max_batch) {
  if (sample.keys < 1) {
    return absl::InvalidArgumentError(
        "--model dlrm needs data with sparse keys per sample (--data criteo:DIR)");
  }
  if (sample.num_classes != 2) {
    return absl::InvalidArgumentError("--model dlrm needs binary labels");
  }
  const std::vector<int64_t> top = spec.hidden.empty() ? std::vector<int64_t>{64} : spec.hidden;
  return MakeDlrm(sample.features, sample.keys, spec.embedding_dim, {64}, top, device, max_batch);
}

}  // namespace ps
