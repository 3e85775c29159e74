#ifndef PS_COMMON_BASE_PARAM_LAYOUT_H_
#define PS_COMMON_BASE_PARAM_LAYOUT_H_

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

// A table of rows of `dim` floats keyed by a 64-bit id (an embedding table): rows exist once a
// step has touched them, and a step pulls and pushes only the rows its batch names. The shards
// own the rows, sharded by the id's hash; a row starts uniform in [-init_scale, init_scale),
// seeded by its key alone, so results do not depend on the number of shards.
struct SparseTableSpec {
  std::string name;
  int64_t dim = 0;
  float init_scale = 0.01f;
};

// What a model's parameters are: the dense layout (one flat buffer cut into contiguous key
// ranges, one per shard) and any sparse tables. The fingerprint the shards check covers both; a
// model without sparse tables has its dense layout's fingerprint.
class ParamDescription {
 public:
  // INVALID_ARGUMENT for a table with an empty name, a name another table or a dense tensor has,
  // or a dimension or scale <= 0.
  static absl::StatusOr<ParamDescription> Create(ParamLayout dense,
                                                 std::vector<SparseTableSpec> sparse = {});

  const ParamLayout& dense() const { return dense_; }
  const std::vector<SparseTableSpec>& sparse() const { return sparse_; }
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  ParamDescription(ParamLayout dense, std::vector<SparseTableSpec> sparse, uint64_t fingerprint)
      : dense_(std::move(dense)), sparse_(std::move(sparse)), fingerprint_(fingerprint) {}
  ParamLayout dense_;
  std::vector<SparseTableSpec> sparse_;
  uint64_t fingerprint_ = 0;
};

// The key range of shard `shard` when [0, total) is cut into `num_shards` contiguous ranges whose
// sizes differ by at most one (the first total % num_shards ranges are one longer). A range may
// be empty when num_shards > total. Requires 0 <= shard < num_shards and total >= 0.
KeyRange ShardRange(int64_t total, int num_shards, int shard);

}  // namespace ps

#endif  // PS_COMMON_BASE_PARAM_LAYOUT_H_
