#ifndef PS_COMMON_PARAM_LAYOUT_H_
#define PS_COMMON_PARAM_LAYOUT_H_

// The parameter layout: a model is an ordered list of named tensors whose values live in one
// contiguous float32 buffer of `total()` elements; gradients use a second buffer of the same
// layout. The layout's fingerprint (names, shapes and order) travels with every request so that
// a worker with a different model is refused.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ps {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t NumElements() const;
};

// A half-open range [begin, end) of element indices into the flat buffer.
struct KeyRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const KeyRange& other) const { return begin == other.begin && end == other.end; }
};

class ParamLayout {
 public:
  // Fails with INVALID_ARGUMENT on an empty list, an empty or duplicate name, or a non-positive
  // dimension.
  static absl::StatusOr<ParamLayout> Create(std::vector<TensorSpec> tensors);

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  // Offset of tensor i in the flat buffer.
  int64_t offset(size_t i) const { return offsets_[i]; }
  int64_t total() const { return total_; }
  // 64-bit FNV-1a over every name and shape in order; equal layouts have equal fingerprints.
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  ParamLayout() = default;
  std::vector<TensorSpec> tensors_;
  std::vector<int64_t> offsets_;
  int64_t total_ = 0;
  uint64_t fingerprint_ = 0;
};

// The key range of shard `shard` when [0, total) is cut into `num_shards` contiguous ranges whose
// sizes differ by at most one (the first total % num_shards ranges are one longer). A range may
// be empty when num_shards > total. Requires 0 <= shard < num_shards and total >= 0.
KeyRange ShardRange(int64_t total, int num_shards, int shard);

}  // namespace ps

#endif  // PS_COMMON_PARAM_LAYOUT_H_
