#include "common/optim/sparse_table.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/base/flush_denormals.h"
#include "common/base/random.h"

namespace ps {

absl::StatusOr<SparseOptimizerKind> ParseSparseOptimizerKind(const std::string& name) {
  if (name == "adagrad") return SparseOptimizerKind::kAdagrad;
  if (name == "adam") return SparseOptimizerKind::kLazyAdam;
  if (name == "sgd") return SparseOptimizerKind::kSgd;
  return absl::InvalidArgumentError(
      absl::StrCat("sparse optimizer '", name, "' is not one of adagrad, adam, sgd"));
}

std::string SparseOptimizerKindName(SparseOptimizerKind kind) {
  switch (kind) {
    case SparseOptimizerKind::kAdagrad:
      return "adagrad";
    case SparseOptimizerKind::kLazyAdam:
      return "adam";
    case SparseOptimizerKind::kSgd:
      return "sgd";
  }
  return "?";
}

absl::Status ValidateSparseOptimizerOptions(const SparseOptimizerOptions& o) {
  if (!(o.lr > 0) || !std::isfinite(o.lr)) {
    return absl::InvalidArgumentError(absl::StrCat("sparse lr must be > 0, got ", o.lr));
  }
  if (!(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1)) {
    return absl::InvalidArgumentError("sparse beta1 and beta2 must be in [0, 1)");
  }
  if (!(o.epsilon > 0)) return absl::InvalidArgumentError("sparse epsilon must be > 0");
  return absl::OkStatus();
}

absl::StatusOr<EvictionPolicy> ParseEvictionPolicy(const std::string& name) {
  if (name == "lru") return EvictionPolicy::kLru;
  if (name == "lfu") return EvictionPolicy::kLfu;
  return absl::InvalidArgumentError(absl::StrCat("eviction '", name, "' is not one of lru, lfu"));
}

std::string EvictionPolicyName(EvictionPolicy policy) {
  return policy == EvictionPolicy::kLru ? "lru" : "lfu";
}

absl::Status ValidateSparseMemoryOptions(const SparseMemoryOptions& o) {
  if (o.capacity < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("table capacity must be >= 0 rows (0: no limit), got ", o.capacity));
  }
  if (o.admit_after < 0 || o.admit_after > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("admit_after must be in [0, 65535] touches, got ", o.admit_after));
  }
  return absl::OkStatus();
}

int ShardOfKey(uint64_t key, int num_shards) {
  return static_cast<int>(Mix64(key ^ 0x726f7773ULL) % static_cast<uint64_t>(num_shards));
}

namespace {

// Counter `row` of the admission sketch for `key`: independent hashes by row.
int64_t SketchCell(uint64_t key, int row) {
  const uint64_t h = Mix64(key ^ (0x736b6574636800ULL + static_cast<uint64_t>(row)));
  return row * SparseTable::kSketchWidth +
         static_cast<int64_t>(h & static_cast<uint64_t>(SparseTable::kSketchWidth - 1));
}

// Adam's bias correction of the t-th update: 1 - beta^t.
float BiasCorrection(float beta, int64_t t) { return 1.0f - std::pow(beta, static_cast<float>(t)); }

// The same, from `table` (its values for t = 0, 1, ...) while t is within it.
float BiasCorrection(const std::vector<float>& table, float beta, int64_t t) {
  return t < static_cast<int64_t>(table.size()) ? table[t] : BiasCorrection(beta, t);
}

}  // namespace

SparseTable::SparseTable(SparseTableSpec spec, const SparseOptimizerOptions& optimizer,
                         const SparseMemoryOptions& memory)
    : spec_(std::move(spec)), optimizer_(optimizer), memory_(memory) {
  if (memory_.admit_after > 1) sketch_.assign(kSketchDepth * kSketchWidth, 0);
  if (optimizer_.kind == SparseOptimizerKind::kLazyAdam) {
    for (int64_t t = 0; t < kBiasCorrections; ++t) {
      first_moment_corrections_.push_back(BiasCorrection(optimizer_.beta1, t));
      second_moment_corrections_.push_back(BiasCorrection(optimizer_.beta2, t));
    }
  }
}

int64_t SparseTable::StateWidth() const {
  switch (optimizer_.kind) {
    case SparseOptimizerKind::kAdagrad:
      return spec_.dim;
    case SparseOptimizerKind::kLazyAdam:
      return 2 * spec_.dim;
    case SparseOptimizerKind::kSgd:
      return 0;
  }
  return 0;
}

int64_t SparseTable::bytes() const {
  return rows() * (static_cast<int64_t>(sizeof(float)) * (dim() + StateWidth()) +
                   static_cast<int64_t>(sizeof(uint64_t) + 2 * sizeof(int64_t))) +
         static_cast<int64_t>(sketch_.size() * sizeof(uint16_t));
}

void SparseTable::InitialRow(const SparseTableSpec& spec, uint64_t key, float* out) {
  uint64_t table = 0xcbf29ce484222325ULL;  // FNV-1a of the name: tables start apart
  for (char c : spec.name) table = (table ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  Rng rng(Mix64(key ^ Mix64(table)));
  for (int64_t d = 0; d < spec.dim; ++d) out[d] = rng.Uniform(-spec.init_scale, spec.init_scale);
}

void SparseTable::Read(absl::Span<const uint64_t> keys, absl::Span<float> out) const {
  const int64_t dim = spec_.dim;
  const int64_t n = static_cast<int64_t>(keys.size());
  // Found first, the index's probes issued kLookAhead keys ahead; then copied, each row fetched
  // kLookAhead rows ahead. A batch's keys are scattered over the table, so otherwise each lookup
  // and each copy waits for its own cache misses.
  std::vector<int64_t> slots(keys.size());
  for (int64_t i = 0; i < n; ++i) {
    if (i + kLookAhead < n) slot_of_.prefetch(keys[i + kLookAhead]);
    const auto it = slot_of_.find(keys[i]);
    slots[i] = it == slot_of_.end() ? -1 : it->second;
  }
  for (int64_t i = 0; i < n; ++i) {
    if (i + kLookAhead < n && slots[i + kLookAhead] >= 0) PrefetchRow(slots[i + kLookAhead]);
    float* row = out.data() + i * dim;
    if (slots[i] >= 0) {
      std::copy_n(RecordOf(slots[i]), dim, row);
    } else if (sketch_.empty()) {
      InitialRow(spec_, keys[i], row);
    } else {
      std::fill_n(row, dim, 0.0f);
    }
  }
}

void SparseTable::PrefetchRow(int64_t slot) const {
  const float* record = RecordOf(slot);
  for (int64_t f = 0; f < record_width(); f += 16) __builtin_prefetch(record + f);
  __builtin_prefetch(clocks_.data() + slot);
}

bool SparseTable::Admit(uint64_t key) {
  uint16_t touches = UINT16_MAX;
  for (int r = 0; r < kSketchDepth; ++r) {
    uint16_t& cell = sketch_[SketchCell(key, r)];
    if (cell < UINT16_MAX) ++cell;
    touches = std::min(touches, cell);
  }
  return touches >= memory_.admit_after;
}

int64_t SparseTable::SlotFor(uint64_t key) {
  const auto found = slot_of_.find(key);
  if (found != slot_of_.end()) return found->second;
  if (!sketch_.empty() && !Admit(key)) return -1;
  if (memory_.capacity > 0 && rows() >= memory_.capacity) EvictOne();
  const int64_t slot = rows();
  slot_of_.emplace(key, slot);
  keys_.push_back(key);
  records_.resize(records_.size() + record_width(), 0.0f);
  InitialRow(spec_, key, RecordOf(slot));
  clocks_.push_back(RowClock{});
  ++counters_.admissions;
  return slot;
}

void SparseTable::EvictOne() {
  // The sample is a function of the eviction count alone: a restored table evicts as the
  // original would have.
  // A table of at most kEvictionSample rows looks at all of them.
  const bool all = rows() <= kEvictionSample;
  int64_t victim = -1;
  for (int j = 0; j < (all ? rows() : kEvictionSample); ++j) {
    const uint64_t draw = Mix64(static_cast<uint64_t>(counters_.evictions) * kEvictionSample + j);
    const int64_t slot = all ? j : static_cast<int64_t>(draw % static_cast<uint64_t>(rows()));
    if (victim < 0) {
      victim = slot;
      continue;
    }
    const RowClock& a = clocks_[slot];
    const RowClock& b = clocks_[victim];
    const bool older = a.last_update < b.last_update;
    const bool rarer = a.updates < b.updates || (a.updates == b.updates && older);
    if (memory_.eviction == EvictionPolicy::kLru ? older : rarer) victim = slot;
  }
  NoteChanged(keys_[victim]);
  RemoveSlot(victim);
  ++counters_.evictions;
}

void SparseTable::RemoveSlot(int64_t slot) {
  const int64_t last = rows() - 1;
  slot_of_.erase(keys_[slot]);
  if (slot != last) {
    keys_[slot] = keys_[last];
    slot_of_[keys_[slot]] = slot;
    std::copy_n(RecordOf(last), record_width(), RecordOf(slot));
    clocks_[slot] = clocks_[last];
  }
  keys_.pop_back();
  records_.resize(last * record_width());
  clocks_.pop_back();
}

void SparseTable::Apply(absl::Span<const uint64_t> keys, absl::Span<const float> grads,
                        float lr_scale) {
  const ScopedFlushDenormals flush;  // as the dense updates (flush_denormals.h)
  const int64_t n = static_cast<int64_t>(keys.size());
  const auto grad_of = [&](int64_t i) { return grads.data() + i * spec_.dim; };
  if (memory_.capacity > 0 && rows() + n > memory_.capacity) {
    // An eviction moves the table's last row into the victim's slot, so a batch that may evict
    // finds and steps each row in turn.
    for (int64_t i = 0; i < n; ++i) StepOrDrop(keys[i], SlotFor(keys[i]), grad_of(i), lr_scale);
    return;
  }
  // No slot moves: the batch's slots are found (and created) first and the rows stepped after,
  // with the lookups and the rows prefetched as in Read. The order of creations and steps is the
  // same as above, so a batch leaves the table as its keys one at a time would.
  std::vector<int64_t> slots(keys.size());
  for (int64_t i = 0; i < n; ++i) {
    if (i + kLookAhead < n) slot_of_.prefetch(keys[i + kLookAhead]);
    slots[i] = SlotFor(keys[i]);
  }
  for (int64_t i = 0; i < n; ++i) {
    if (i + kLookAhead < n && slots[i + kLookAhead] >= 0) PrefetchRow(slots[i + kLookAhead]);
    StepOrDrop(keys[i], slots[i], grad_of(i), lr_scale);
  }
}

void SparseTable::StepOrDrop(uint64_t key, int64_t slot, const float* grad, float lr_scale) {
  if (slot < 0) {
    ++counters_.not_admitted;
    return;
  }
  Step(slot, grad, lr_scale);
  NoteChanged(key);
}

void SparseTable::Step(int64_t slot, const float* g, float lr_scale) {
  const int64_t dim = spec_.dim;
  float* w = RecordOf(slot);
  float* s = w + dim;
  const float lr = optimizer_.lr * lr_scale;
  const int64_t t = ++clocks_[slot].updates;
  clocks_[slot].last_update = ++tick_;
  switch (optimizer_.kind) {
    case SparseOptimizerKind::kAdagrad:
      for (int64_t d = 0; d < dim; ++d) {
        s[d] += g[d] * g[d];
        w[d] -= lr * g[d] / (std::sqrt(s[d]) + optimizer_.epsilon);
      }
      break;
    case SparseOptimizerKind::kLazyAdam: {
      const float b1 = optimizer_.beta1, b2 = optimizer_.beta2;
      const float c1 = BiasCorrection(first_moment_corrections_, b1, t);
      const float c2 = BiasCorrection(second_moment_corrections_, b2, t);
      float* m = s;
      float* v = s + dim;
      for (int64_t d = 0; d < dim; ++d) {
        m[d] = b1 * m[d] + (1 - b1) * g[d];
        v[d] = b2 * v[d] + (1 - b2) * g[d] * g[d];
        w[d] -= lr * (m[d] / c1) / (std::sqrt(v[d] / c2) + optimizer_.epsilon);
      }
      break;
    }
    case SparseOptimizerKind::kSgd:
      for (int64_t d = 0; d < dim; ++d) w[d] -= lr * g[d];
      break;
  }
}

SparseTable::Contents SparseTable::Export() const {
  Contents c;
  c.keys.reserve(rows());
  c.values.reserve(rows() * dim());
  c.state.reserve(rows() * StateWidth());
  c.updates.reserve(rows());
  c.last_update.reserve(rows());
  for (int64_t slot = 0; slot < rows(); ++slot) RowInto(slot, &c);
  c.tick = tick_;
  c.counters = counters_;
  c.sketch = sketch_;
  return c;
}

void SparseTable::RowInto(int64_t slot, Contents* out) const {
  const int64_t dim = spec_.dim, width = StateWidth();
  out->keys.push_back(keys_[slot]);
  const float* record = RecordOf(slot);
  out->values.insert(out->values.end(), record, record + dim);
  out->state.insert(out->state.end(), record + dim, record + dim + width);
  out->updates.push_back(clocks_[slot].updates);
  out->last_update.push_back(clocks_[slot].last_update);
}

void SparseTable::MarkUnchanged() {
  tracking_changes_ = true;
  changed_.clear();
}

SparseTable::Contents SparseTable::ExportChanges() const {
  Contents c;
  c.tick = tick_;
  c.counters = counters_;
  c.sketch = sketch_;
  std::vector<uint64_t> changed(changed_.begin(), changed_.end());
  std::sort(changed.begin(), changed.end());  // the same delta for the same changes
  for (uint64_t key : changed) {
    const auto it = slot_of_.find(key);
    if (it == slot_of_.end()) {
      c.removed.push_back(key);
    } else {
      RowInto(it->second, &c);
    }
  }
  return c;
}

absl::Status SparseTable::ApplyChanges(Contents delta) {
  Contents merged;
  absl::flat_hash_set<uint64_t> replaced(delta.removed.begin(), delta.removed.end());
  replaced.insert(delta.keys.begin(), delta.keys.end());
  for (int64_t slot = 0; slot < rows(); ++slot) {
    if (!replaced.contains(keys_[slot])) RowInto(slot, &merged);
  }
  const int64_t kept = static_cast<int64_t>(merged.keys.size());
  merged.keys.insert(merged.keys.end(), delta.keys.begin(), delta.keys.end());
  merged.values.insert(merged.values.end(), delta.values.begin(), delta.values.end());
  merged.state.insert(merged.state.end(), delta.state.begin(), delta.state.end());
  merged.updates.insert(merged.updates.end(), delta.updates.begin(), delta.updates.end());
  merged.last_update.insert(merged.last_update.end(), delta.last_update.begin(),
                            delta.last_update.end());
  if (static_cast<int64_t>(merged.keys.size()) - kept != static_cast<int64_t>(delta.keys.size())) {
    return absl::InvalidArgumentError("delta is inconsistent");
  }
  merged.tick = delta.tick;
  merged.counters = delta.counters;
  merged.sketch = std::move(delta.sketch);
  return Restore(std::move(merged));
}

absl::Status SparseTable::Restore(Contents c) {
  const int64_t n = static_cast<int64_t>(c.keys.size());
  if (static_cast<int64_t>(c.values.size()) != n * dim() ||
      static_cast<int64_t>(c.state.size()) != n * StateWidth() ||
      static_cast<int64_t>(c.updates.size()) != n ||
      static_cast<int64_t>(c.last_update.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("table '", spec_.name, "': ", n,
                                                   " rows with values, state or counts of "
                                                   "another length"));
  }
  if (memory_.capacity > 0 && n > memory_.capacity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table '", spec_.name, "': ", n, " rows, more than its capacity ", memory_.capacity));
  }
  if (!c.sketch.empty() && c.sketch.size() != sketch_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("table '", spec_.name,
                                                   "': an admission sketch of ", c.sketch.size(),
                                                   " counters, not ", sketch_.size()));
  }
  absl::flat_hash_map<uint64_t, int64_t> slot_of;
  slot_of.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    if (!slot_of.try_emplace(c.keys[i], i).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("table '", spec_.name, "': key ", c.keys[i], " twice"));
    }
  }
  slot_of_ = std::move(slot_of);
  keys_ = std::move(c.keys);
  const int64_t dim = spec_.dim, width = StateWidth();
  records_.resize(n * record_width());
  clocks_.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    float* record = RecordOf(i);
    std::copy_n(c.values.data() + i * dim, dim, record);
    std::copy_n(c.state.data() + i * width, width, record + dim);
    clocks_[i] = RowClock{c.updates[i], c.last_update[i]};
  }
  tick_ = c.tick;
  counters_ = c.counters;
  // Without a sketch (admission was off when it was written) the touches count from zero.
  if (!c.sketch.empty()) {
    sketch_ = std::move(c.sketch);
  } else {
    std::fill(sketch_.begin(), sketch_.end(), 0);
  }
  if (tracking_changes_) changed_.clear();
  return absl::OkStatus();
}

}  // namespace ps
