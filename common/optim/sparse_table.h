#ifndef PS_COMMON_OPTIM_SPARSE_TABLE_H_
#define PS_COMMON_OPTIM_SPARSE_TABLE_H_

// A shard's part of a sparse table: the rows it owns (ShardOfKey), keyed by 64-bit id, each with
// its optimizer state. A row exists once a gradient has touched it; until then it reads as its
// initial values, which depend on the table and the key alone (so a run's results do not depend
// on the number of shards). The optimizers are row-wise: a step updates only the rows it names.
//
// Memory (SparseMemoryOptions): a capacity of rows with eviction, and admission: a key gets a
// row of its own only at its admit_after-th gradient; before that it reads as the table's shared
// default row (zeros) and its gradients are counted and dropped. Touches are counted in a
// count-min sketch of fixed size (kSketchDepth x kSketchWidth 16-bit counters, 8 MiB), which
// may count a key high (never low), so a rare key may be admitted early. Its collisions are
// between keys of the same shard: with admission on, which keys are admitted when can depend on
// the number of shards.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
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

// Which row leaves a full table. Both sample kEvictionSample rows (deterministically, from the
// table's counters and its rows' order; all rows when there are no more) and evict the one that
// was updated least recently (kLru) or least often (kLfu; ties: least recently), as Redis does:
// exact orders would cost 16 bytes a row. A table rebuilt from an incremental checkpoint holds
// the same rows in another order, so its later victims may differ from the original's.
enum class EvictionPolicy { kLru, kLfu };
absl::StatusOr<EvictionPolicy> ParseEvictionPolicy(const std::string& name);
std::string EvictionPolicyName(EvictionPolicy policy);

struct SparseMemoryOptions {
  int64_t capacity = 0;  // rows per table on this shard; 0: no limit
  EvictionPolicy eviction = EvictionPolicy::kLru;
  int32_t admit_after = 0;  // 0 or 1: every key gets its row at its first gradient
};
absl::Status ValidateSparseMemoryOptions(const SparseMemoryOptions& options);

// The shard (0..num_shards-1) that owns `key`: by a hash of the key, so that popular ids spread
// over the shards whatever their values.
int ShardOfKey(uint64_t key, int num_shards);

class SparseTable {
 public:
  static constexpr int kEvictionSample = 8;
  static constexpr int kSketchDepth = 4;
  static constexpr int64_t kSketchWidth = int64_t{1} << 20;

  SparseTable(SparseTableSpec spec, const SparseOptimizerOptions& optimizer,
              const SparseMemoryOptions& memory = {});

  const SparseTableSpec& spec() const { return spec_; }
  const SparseMemoryOptions& memory() const { return memory_; }
  int64_t dim() const { return spec_.dim; }
  int64_t rows() const { return static_cast<int64_t>(keys_.size()); }
  // Memory held by the rows, their state and the admission sketch (not the index's overhead).
  int64_t bytes() const;

  // What the table did since it was created (or restored: the counts are in checkpoints).
  struct Counters {
    int64_t admissions = 0;    // rows created
    int64_t evictions = 0;     // rows removed to make room
    int64_t not_admitted = 0;  // row gradients dropped: their key was not yet admitted
  };
  const Counters& counters() const { return counters_; }

  // The initial values of `key`'s row in `spec`'s table: uniform in [-init_scale, init_scale).
  static void InitialRow(const SparseTableSpec& spec, uint64_t key, float* out);

  // Writes the rows of `keys` into out (keys.size() * dim()): their values, or for keys without
  // a row their initial values (zeros, the shared default, when admission is on). Creates none.
  void Read(absl::Span<const uint64_t> keys, absl::Span<float> out) const;
  // One optimizer step on the rows of `keys` (distinct) with gradients `grads` (keys.size() *
  // dim()), creating the rows of admitted keys that do not exist from their initial values first
  // (evicting others when the table is full). `lr_scale` multiplies this step's learning rate.
  void Apply(absl::Span<const uint64_t> keys, absl::Span<const float> grads, float lr_scale = 1.0f);

  // Rows for checkpoints: keys, values (rows * dim), state (rows * StateWidth()), each row's
  // update count and last update (the table's tick), in one order; and the table's clocks and
  // admission sketch (empty when admission is off).
  struct Contents {
    std::vector<uint64_t> keys;
    std::vector<float> values;
    std::vector<float> state;
    std::vector<int64_t> updates;
    std::vector<int64_t> last_update;
    int64_t tick = 0;
    Counters counters;
    std::vector<uint16_t> sketch;
    // A delta (ExportChanges): the keys whose rows were removed since the mark.
    std::vector<uint64_t> removed;
  };
  // Every row. Restore replaces the table's contents with them; INVALID_ARGUMENT when the
  // lengths do not fit, a key repeats or there are more rows than the capacity.
  Contents Export() const;
  absl::Status Restore(Contents contents);
  // Incremental checkpoints. MarkUnchanged starts (or restarts) recording which keys change;
  // ExportChanges returns the rows created or updated since the mark, the keys removed since,
  // and the clocks and sketch; ApplyChanges lays such a delta over the contents of the mark.
  void MarkUnchanged();
  Contents ExportChanges() const;
  absl::Status ApplyChanges(Contents delta);
  bool tracking_changes() const { return tracking_changes_; }
  int64_t StateWidth() const;  // floats of optimizer state per row

 private:
  // The slot of `key`'s row, creating it if the key is admitted (evicting one when full); -1
  // when it is not admitted yet (its touch is counted).
  int64_t SlotFor(uint64_t key);
  bool Admit(uint64_t key);  // counts a touch; whether the key has reached admit_after
  void EvictOne();
  void RemoveSlot(int64_t slot);  // moves the last slot into its place
  void Step(int64_t slot, const float* grad, float lr_scale);
  // Step, or for a key not admitted (slot -1) counts the dropped gradient.
  void StepOrDrop(uint64_t key, int64_t slot, const float* grad, float lr_scale);
  // Asks the CPU for the cache lines of `slot`'s row, its state and its counters.
  void PrefetchRow(int64_t slot) const;
  // How far ahead Read and Apply prefetch: enough rows to cover a miss's latency.
  static constexpr int64_t kLookAhead = 8;
  void NoteChanged(uint64_t key) {
    if (tracking_changes_) changed_.insert(key);
  }
  void RowInto(int64_t slot, Contents* out) const;  // appends the slot's row

  SparseTableSpec spec_;
  SparseOptimizerOptions optimizer_;
  SparseMemoryOptions memory_;
  absl::flat_hash_map<uint64_t, int64_t> slot_of_;
  std::vector<uint64_t> keys_;  // per slot
  // A slot's row as one record of record_width() floats, its values (dim) then its optimizer
  // state (StateWidth()), so that a step touches neighbouring cache lines.
  int64_t record_width() const { return spec_.dim + StateWidth(); }
  float* RecordOf(int64_t slot) { return records_.data() + slot * record_width(); }
  const float* RecordOf(int64_t slot) const { return records_.data() + slot * record_width(); }
  struct RowClock {
    int64_t updates = 0;      // steps applied to the row
    int64_t last_update = 0;  // tick_ of its last step
  };
  std::vector<float> records_;    // slot * record_width()
  std::vector<RowClock> clocks_;  // per slot
  int64_t tick_ = 0;              // row steps applied, ever
  Counters counters_;
  std::vector<uint16_t> sketch_;  // kSketchDepth x kSketchWidth when admit_after > 1
  // Lazy Adam's bias corrections 1 - beta^t of a row's t-th update, for t < kBiasCorrections:
  // the same values std::pow gives, computed once instead of twice per row and step.
  static constexpr int64_t kBiasCorrections = 4096;
  std::vector<float> first_moment_corrections_, second_moment_corrections_;
  bool tracking_changes_ = false;
  absl::flat_hash_set<uint64_t> changed_;  // keys created, updated or removed since the mark
};

// One table's part on a shard, as the shard reports it.
struct SparseTableStatus {
  std::string name;
  int64_t rows = 0;
  int64_t bytes = 0;     // SparseTable::bytes
  int64_t capacity = 0;  // 0: no limit
  SparseTable::Counters counters;
};

// Time a shard spent on sparse rows: reading them for pulls, and applying pushed ones (buffering
// them in a BSP round, and the round's apply); and how many calls carried rows.
struct SparseCallTiming {
  int64_t pulls = 0;
  double pull_seconds = 0;
  int64_t pushes = 0;
  double push_seconds = 0;
};

}  // namespace ps

#endif  // PS_COMMON_OPTIM_SPARSE_TABLE_H_
