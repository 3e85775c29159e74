// The CNN; registered in model_registry.cc.

#include "absl/strings/str_cat.h"
#include "common/layers.h"
#include "common/model_registry.h"

namespace ps {

absl::StatusOr<std::unique_ptr<Model>> MakeCnn(const ImageShape& input,
                                               const std::vector<int64_t>& hidden, int64_t classes,
                                               Device& device, int max_batch) {
  constexpr int kKernel = 5;
  constexpr int kPool = 2;
  constexpr int kChannels1 = 32;
  constexpr int kChannels2 = 64;
  std::vector<std::unique_ptr<Layer>> layers;
  int h = input.height, w = input.width;
  layers.push_back(std::make_unique<Conv2d>("conv1", h, w, input.channels, kChannels1, kKernel));
  h -= kKernel - 1;
  w -= kKernel - 1;
  layers.push_back(std::make_unique<Relu>(int64_t{h} * w * kChannels1));
  layers.push_back(std::make_unique<MaxPool2d>(h, w, kChannels1, kPool));
  h /= kPool;
  w /= kPool;
  layers.push_back(std::make_unique<Conv2d>("conv2", h, w, kChannels1, kChannels2, kKernel));
  h -= kKernel - 1;
  w -= kKernel - 1;
  layers.push_back(std::make_unique<Relu>(int64_t{h} * w * kChannels2));
  layers.push_back(std::make_unique<MaxPool2d>(h, w, kChannels2, kPool));
  h /= kPool;
  w /= kPool;
  if (h < 1 || w < 1) {
    return absl::InvalidArgumentError(absl::StrCat("the cnn needs images of at least 16x16, got ",
                                                   input.height, "x", input.width));
  }
  int64_t width = int64_t{h} * w * kChannels2;
  int index = 1;
  for (int64_t units : hidden) {
    if (units <= 0) return absl::InvalidArgumentError(absl::StrCat("hidden size ", units, " <= 0"));
    layers.push_back(std::make_unique<Linear>(absl::StrCat("fc", index++), width, units));
    layers.push_back(std::make_unique<Relu>(units));
    width = units;
  }
  layers.push_back(std::make_unique<Linear>(absl::StrCat("fc", index), width, classes));
  return Model::Create("cnn", std::move(layers), device, max_batch);
}

absl::StatusOr<std::unique_ptr<Model>> BuildCnn(const ModelSpec& spec, const SampleShape& sample,
                                                Device& device, int max_batch) {
  const std::vector<int64_t> hidden = spec.hidden.empty() ? std::vector<int64_t>{128} : spec.hidden;
  return MakeCnn(sample.image, hidden, sample.num_classes, device, max_batch);
}

}  // namespace ps
