#ifndef PS_COMMON_OPTIM_SPARSE_TABLE_H_
#define PS_COMMON_OPTIM_SPARSE_TABLE_H_

// A shard's part of a sparse table: the rows it owns (ShardOfKey), keyed by 64-bit id, each with
// its optimizer state. A row exists once a gradient has touched it; until then it reads as its
// initial values, which depend on the table and the key alone (so a run's results do not depend
// on the number of shards). The optimizers are row-wise: a step updates only the rows it names.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/base/param_layout.h"

namespace ps {

enum class SparseOptimizerKind {
  kAdagrad,   // acc += g^2; w -= lr * g / (sqrt(acc) + epsilon) (PyTorch's Adagrad, acc from 0)
  kLazyAdam,  // Adam on the touched rows only, bias-corrected by each row's own update count
  kSgd,       // w -= lr * g
};

absl::StatusOr<SparseOptimizerKind> ParseSparseOptimizerKind(const std::string& name);
std::string SparseOptimizerKindName(SparseOptimizerKind kind);

struct SparseOptimizerOptions {
  SparseOptimizerKind kind = SparseOptimizerKind::kAdagrad;
  float lr = 0.01f;
  float beta1 = 0.9f;     // kLazyAdam
  float beta2 = 0.999f;   // kLazyAdam
  float epsilon = 1e-8f;  // kAdagrad, kLazyAdam
};

// INVALID_ARGUMENT naming the field when an option is out of range.
absl::Status ValidateSparseOptimizerOptions(const SparseOptimizerOptions& options);

// The shard (0..num_shards-1) that owns `key`: by a hash of the key, so that popular ids spread
// over the shards whatever their values.
int ShardOfKey(uint64_t key, int num_shards);

class SparseTable {
 public:
  SparseTable(SparseTableSpec spec, const SparseOptimizerOptions& optimizer);

  const SparseTableSpec& spec() const { return spec_; }
  int64_t dim() const { return spec_.dim; }
  int64_t rows() const { return static_cast<int64_t>(keys_.size()); }
  // Memory held by the rows and their state (not counting the index's overhead).
  int64_t bytes() const;

  // The initial values of `key`'s row in `spec`'s table: uniform in [-init_scale, init_scale).
  static void InitialRow(const SparseTableSpec& spec, uint64_t key, float* out);

  // Writes the rows of `keys` into out (keys.size() * dim()): their values, or the initial
  // values of rows that do not exist (none is created).
  void Read(absl::Span<const uint64_t> keys, absl::Span<float> out) const;
  // One optimizer step on the rows of `keys` (distinct) with gradients `grads` (keys.size() *
  // dim()), creating the rows that do not exist from their initial values first. `lr_scale`
  // multiplies this step's learning rate.
  void Apply(absl::Span<const uint64_t> keys, absl::Span<const float> grads, float lr_scale = 1.0f);

  // Every row, for checkpoints: keys, values (rows * dim), state (rows * StateWidth()) and each
  // row's update count, in one order. Restore replaces the table's contents; INVALID_ARGUMENT
  // when the lengths do not fit.
  struct Contents {
    std::vector<uint64_t> keys;
    std::vector<float> values;
    std::vector<float> state;
    std::vector<int64_t> updates;
  };
  Contents Export() const;
  absl::Status Restore(Contents contents);
  int64_t StateWidth() const;  // floats of optimizer state per row

 private:
  int64_t SlotOf(uint64_t key);  // creating the row if needed
  void Step(int64_t slot, const float* grad, float lr_scale);

  SparseTableSpec spec_;
  SparseOptimizerOptions optimizer_;
  absl::flat_hash_map<uint64_t, int64_t> slot_of_;
  std::vector<uint64_t> keys_;    // per slot
  std::vector<float> values_;     // slot * dim
  std::vector<float> state_;      // slot * StateWidth()
  std::vector<int64_t> updates_;  // per slot: steps applied to the row
};

}  // namespace ps

#endif  // PS_COMMON_OPTIM_SPARSE_TABLE_H_
