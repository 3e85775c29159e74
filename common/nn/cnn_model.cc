// The CNN; registered in model_registry.cc.

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/nn/layers.h"
#include "common/nn/model_registry.h"

namespace ps {

absl::StatusOr<std::unique_ptr<Model>> MakeCnn(const ImageShape& input,
                                               const std::vector<int64_t>& hidden, int64_t classes,
                                               Device& device, int max_batch) {
  constexpr int kKernel = 5;
  constexpr int kPool = 2;
  std::vector<std::unique_ptr<Layer>> layers;
  int h = input.height, w = input.width, channels = input.channels;
  int block = 1;
  for (const int out_channels : {32, 64}) {  // conv -> ReLU -> max pool, twice
    layers.push_back(std::make_unique<Conv2d>(absl::StrCat("conv", block++), h, w, channels,
                                              out_channels, kKernel));
    h -= kKernel - 1;
    w -= kKernel - 1;
    channels = out_channels;
    layers.push_back(std::make_unique<Relu>(int64_t{h} * w * channels));
    layers.push_back(std::make_unique<MaxPool2d>(h, w, channels, kPool));
    h /= kPool;
    w /= kPool;
  }
  if (h < 1 || w < 1) {
    return absl::InvalidArgumentError(absl::StrCat("the cnn needs images of at least 16x16, got ",
                                                   input.height, "x", input.width));
  }
  RETURN_IF_ERROR(AppendClassifierHead(int64_t{h} * w * channels, hidden, classes, &layers));
  return Model::Create("cnn", std::move(layers), device, max_batch);
}

absl::StatusOr<std::unique_ptr<Model>> BuildCnn(const ModelSpec& spec, const SampleShape& sample,
                                                Device& device, int max_batch) {
  const std::vector<int64_t> hidden = spec.hidden.empty() ? std::vector<int64_t>{128} : spec.hidden;
  return MakeCnn(sample.image, hidden, sample.num_classes, device, max_batch);
}

}  // namespace ps
