#include "common/optim/sparse_table.h"

#include <cmath>

#include "absl/strings/str_cat.h"
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

int ShardOfKey(uint64_t key, int num_shards) {
  return static_cast<int>(Mix64(key ^ 0x726f7773ULL) % static_cast<uint64_t>(num_shards));
}

SparseTable::SparseTable(SparseTableSpec spec, const SparseOptimizerOptions& optimizer)
    : spec_(std::move(spec)), optimizer_(optimizer) {}

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
                   static_cast<int64_t>(sizeof(uint64_t) + sizeof(int64_t)));
}

void SparseTable::InitialRow(const SparseTableSpec& spec, uint64_t key, float* out) {
  uint64_t table = 0xcbf29ce484222325ULL;  // FNV-1a of the name: tables start apart
  for (char c : spec.name) table = (table ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  Rng rng(Mix64(key ^ Mix64(table)));
  for (int64_t d = 0; d < spec.dim; ++d) out[d] = rng.Uniform(-spec.init_scale, spec.init_scale);
}

void SparseTable::Read(absl::Span<const uint64_t> keys, absl::Span<float> out) const {
  const int64_t dim = spec_.dim;
  for (size_t i = 0; i < keys.size(); ++i) {
    float* row = out.data() + static_cast<int64_t>(i) * dim;
    const auto it = slot_of_.find(keys[i]);
    if (it == slot_of_.end()) {
      InitialRow(spec_, keys[i], row);
    } else {
      std::copy_n(values_.data() + it->second * dim, dim, row);
    }
  }
}

int64_t SparseTable::SlotOf(uint64_t key) {
  const auto [it, inserted] = slot_of_.try_emplace(key, rows());
  if (inserted) {
    keys_.push_back(key);
    values_.resize(values_.size() + spec_.dim);
    InitialRow(spec_, key, values_.data() + it->second * spec_.dim);
    state_.resize(state_.size() + StateWidth(), 0.0f);
    updates_.push_back(0);
  }
  return it->second;
}

void SparseTable::Apply(absl::Span<const uint64_t> keys, absl::Span<const float> grads,
                        float lr_scale) {
  for (size_t i = 0; i < keys.size(); ++i) {
    Step(SlotOf(keys[i]), grads.data() + static_cast<int64_t>(i) * spec_.dim, lr_scale);
  }
}

void SparseTable::Step(int64_t slot, const float* g, float lr_scale) {
  const int64_t dim = spec_.dim;
  float* w = values_.data() + slot * dim;
  float* s = state_.data() + slot * StateWidth();
  const float lr = optimizer_.lr * lr_scale;
  const int64_t t = ++updates_[slot];
  switch (optimizer_.kind) {
    case SparseOptimizerKind::kAdagrad:
      for (int64_t d = 0; d < dim; ++d) {
        s[d] += g[d] * g[d];
        w[d] -= lr * g[d] / (std::sqrt(s[d]) + optimizer_.epsilon);
      }
      break;
    case SparseOptimizerKind::kLazyAdam: {
      const float b1 = optimizer_.beta1, b2 = optimizer_.beta2;
      const float c1 = 1.0f - std::pow(b1, static_cast<float>(t));
      const float c2 = 1.0f - std::pow(b2, static_cast<float>(t));
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

SparseTable::Contents SparseTable::Export() const { return {keys_, values_, state_, updates_}; }

absl::Status SparseTable::Restore(Contents c) {
  const int64_t n = static_cast<int64_t>(c.keys.size());
  if (static_cast<int64_t>(c.values.size()) != n * dim() ||
      static_cast<int64_t>(c.state.size()) != n * StateWidth() ||
      static_cast<int64_t>(c.updates.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("table '", spec_.name, "': ", n,
                                                   " rows with values, state or counts of "
                                                   "another length"));
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
  values_ = std::move(c.values);
  state_ = std::move(c.state);
  updates_ = std::move(c.updates);
  return absl::OkStatus();
}

}  // namespace ps
