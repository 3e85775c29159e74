#ifndef PS_COMMON_DATASET_H_
#define PS_COMMON_DATASET_H_

// Image-classification data sets in memory, and the loader for the IDX files of (Fashion-)MNIST.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ps {

// `size()` images of rows x cols uint8 pixels with int32 labels in [0, num_classes).
struct Dataset {
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  int64_t features() const { return static_cast<int64_t>(rows) * cols; }

  // Writes samples `indices` as normalised floats, x (n, features), and their labels y (n).
  // Pixels become (p / 255 - mean) / stddev, with Fashion-MNIST's training-set mean and stddev.
  void Gather(const int32_t* indices, int n, float* x, int32_t* y) const;
  // Keeps the first `n` samples (all when n <= 0 or n >= size()).
  void Truncate(int64_t n);

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
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, const std::string& split);

// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

}  // namespace ps

#endif  // PS_COMMON_DATASET_H_
