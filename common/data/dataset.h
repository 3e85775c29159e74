#ifndef PS_COMMON_DATA_DATASET_H_
#define PS_COMMON_DATA_DATASET_H_

// The data set interface, image-classification data sets in memory, and the loader for the IDX
// files of (Fashion-)MNIST.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ps {

// The shape of one image sample, NHWC.
struct ImageShape {
  int height = 28;
  int width = 28;
  int channels = 1;
  int64_t features() const { return int64_t{height} * width * channels; }
};

// What one sample of a data set is, as a model is built for it.
struct SampleShape {
  int64_t features = 0;  // dense float inputs per sample
  int num_classes = 0;   // labels in [0, num_classes)
  ImageShape image;      // the features as an image, for the models that convolve them
  int keys = 0;          // sparse keys per sample (Dataset::keys_per_sample())
  int labels = 1;        // labels per sample: a language model's window has one per position
};

// A labelled data set that a worker draws its batches from by index (BatchPlan). Kinds of data
// (images today; click logs and text next) implement it and register in data_registry.cc. A kind
// whose samples carry more than dense features and one label (sparse keys, token sequences)
// extends the batch it gathers into; the trainer reaches a data set only through this interface.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual SampleShape shape() const = 0;
  int64_t features() const { return shape().features; }
  // Writes samples `indices` (each in [0, size())) as dense features x (n, features) and their
  // labels y (n, shape().labels).
  virtual void Gather(const int32_t* indices, int n, float* x, int32_t* y) const = 0;
  // Sparse keys per sample (categorical values that a model looks up in an embedding table);
  // 0 for data without them.
  virtual int keys_per_sample() const { return 0; }
  // Writes the keys of samples `indices` as keys (n, keys_per_sample()).
  virtual void GatherKeys(const int32_t* /*indices*/, int /*n*/, uint64_t* /*keys*/) const {}
  // Keeps the first `n` samples (all when n <= 0 or n >= size()).
  virtual void Truncate(int64_t n) = 0;
  // What the data's samples mean beyond their shape, which every process of a job must share (a
  // text's vocabulary: the same ids must be the same characters); 0 when the shape says all.
  virtual uint64_t meaning_fingerprint() const { return 0; }
};

// `size()` images of rows x cols uint8 pixels with int32 labels in [0, num_classes).
class ImageDataset final : public Dataset {
 public:
  int64_t size() const override { return static_cast<int64_t>(labels.size()); }
  SampleShape shape() const override {
    return SampleShape{int64_t{rows} * cols, num_classes, ImageShape{rows, cols, 1}};
  }
  // Pixels become (p / 255 - mean) / stddev, with Fashion-MNIST's training-set mean and stddev.
  void Gather(const int32_t* indices, int n, float* x, int32_t* y) const override;
  void Truncate(int64_t n) override;

  int rows = 0;
  int cols = 0;
  int num_classes = 10;
  std::vector<uint8_t> pixels;  // size() * rows * cols
  std::vector<int32_t> labels;  // size()
};

// Reads one IDX file, gzip-compressed or not. `expected_magic` is 0x00000803 for images and
// 0x00000801 for labels. Errors name the file: NOT_FOUND when it is missing, DATA_LOSS when it is
// truncated, corrupt (bad gzip stream) or has the wrong magic or dimensions.
struct IdxFile {
  std::vector<int32_t> dims;
  std::vector<uint8_t> data;
};
absl::StatusOr<IdxFile> ReadIdxFile(const std::string& path, uint32_t expected_magic);

// Loads "train" or "test" from `dir`, which holds {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz
// (as Debian's dataset-fashion-mnist installs them in /usr/share/datasets/fashion-mnist).
// Also fails with DATA_LOSS when images and labels disagree in count or a label is not in 0..9.
absl::StatusOr<ImageDataset> LoadFashionMnist(const std::string& dir, const std::string& split);

// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

}  // namespace ps

#endif  // PS_COMMON_DATA_DATASET_H_
