// Shard's sparse tables: the checks of a request's rows, applying pushed rows (at once, or as the
// BSP round's mean), and reading rows for a pull.

#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "server/shard.h"

namespace ps {

absl::Status Shard::ValidateRowsLocked(const std::vector<SparseRows>& rows,
                                       bool with_values) const {
  for (const SparseRows& entry : rows) {
    if (entry.table < 0 || entry.table >= static_cast<int>(tables_.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sparse table ", entry.table, " is unknown (the model declared ", tables_.size(), ")"));
    }
    const SparseTable& table = *tables_[entry.table];
    for (uint64_t key : entry.keys) {
      if (ShardOfKey(key, options_.num_shards) != options_.shard_id) {
        return absl::InvalidArgumentError(
            absl::StrCat("key ", key, " of table '", table.spec().name, "' belongs to shard ",
                         ShardOfKey(key, options_.num_shards), ", not ", options_.shard_id));
      }
    }
    if (!with_values) {
      if (!entry.values.empty()) {
        return absl::InvalidArgumentError("a pull's rows carry keys only");
      }
      continue;
    }
    const size_t expected = entry.keys.size() * static_cast<size_t>(table.dim());
    if (entry.values.size() != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat("table '", table.spec().name, "': ", entry.values.size(),
                       " gradient values for ", entry.keys.size(), " rows of ", table.dim()));
    }
    absl::flat_hash_set<uint64_t> seen;
    seen.reserve(entry.keys.size());
    for (uint64_t key : entry.keys) {
      if (!seen.insert(key).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("table '", table.spec().name, "': key ", key, " pushed twice"));
      }
    }
  }
  return absl::OkStatus();
}

bool RowsFinite(const std::vector<SparseRows>& rows) {
  for (const SparseRows& entry : rows) {
    for (float v : entry.values) {
      if (!std::isfinite(v)) return false;
    }
  }
  return true;
}

void Shard::ApplyRowsLocked(const std::vector<SparseRows>& rows, float lr_scale) {
  if (rows.empty()) return;
  const absl::Time start = absl::Now();
  for (const SparseRows& entry : rows) {
    tables_[entry.table]->Apply(entry.keys, entry.values, lr_scale);
  }
  ++sparse_timing_.pushes;
  sparse_timing_.push_seconds += absl::ToDoubleSeconds(absl::Now() - start);
}

void Shard::ApplyRoundRowsLocked(int contributors) {
  if (tables_.empty()) return;
  const absl::Time start = absl::Now();  // the round's share of its pushes' time
  for (size_t t = 0; t < tables_.size(); ++t) {
    const int64_t dim = tables_[t]->dim();
    SparseRows merged;
    merged.table = static_cast<int>(t);
    absl::flat_hash_map<uint64_t, int64_t> index;
    for (size_t r = 0; r < round_rows_.size(); ++r) {  // rank order: the sums do not depend on
      if (!round_has_gradient_[r]) continue;           // the order the pushes arrived in
      for (const SparseRows& entry : round_rows_[r]) {
        if (entry.table != static_cast<int>(t)) continue;
        for (size_t i = 0; i < entry.keys.size(); ++i) {
          const auto [it, inserted] =
              index.try_emplace(entry.keys[i], static_cast<int64_t>(merged.keys.size()));
          if (inserted) {
            merged.keys.push_back(entry.keys[i]);
            merged.values.resize(merged.values.size() + dim, 0.0f);
          }
          float* sum = merged.values.data() + it->second * dim;
          const float* g = entry.values.data() + static_cast<int64_t>(i) * dim;
          for (int64_t d = 0; d < dim; ++d) sum[d] += g[d];
        }
      }
    }
    if (contributors > 1) {
      const float inv = 1.0f / static_cast<float>(contributors);
      for (float& x : merged.values) x *= inv;
    }
    tables_[t]->Apply(merged.keys, merged.values);
  }
  for (auto& rows : round_rows_) rows.clear();
  sparse_timing_.push_seconds += absl::ToDoubleSeconds(absl::Now() - start);
}

void Shard::RecordPulledKeysLocked(int rank, int64_t clock, const std::vector<SparseRows>& rows) {
  if (options_.consistency.mode != ConsistencyMode::kBsp || rows.empty()) return;
  PulledKeys& pulled = pulled_keys_[rank];
  // Pulls of one clock add up: a worker may pull a step's rows in several calls (a model with
  // several tables whose lookups run one after another, or micro-batches of one step).
  if (pulled.clock != clock) {
    pulled.clock = clock;
    pulled.keys.resize(tables_.size());
    for (auto& keys : pulled.keys) keys.clear();
  }
  for (const SparseRows& entry : rows) {
    pulled.keys[entry.table].insert(entry.keys.begin(), entry.keys.end());
  }
}

absl::Status Shard::CheckPushedKeysLocked(int rank, int64_t clock,
                                          const std::vector<SparseRows>& rows) const {
  if (options_.consistency.mode != ConsistencyMode::kBsp || rows.empty()) return absl::OkStatus();
  const PulledKeys& pulled = pulled_keys_[rank];
  for (const SparseRows& entry : rows) {
    if (entry.keys.empty()) continue;
    if (pulled.clock != clock) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", rank, " pushed rows for clock ", clock,
                       " but its latest pull of rows was for clock ", pulled.clock,
                       " (BSP: a step pushes the rows it pulled)"));
    }
    const auto& keys = pulled.keys[entry.table];
    for (uint64_t key : entry.keys) {
      if (!keys.contains(key)) {
        return absl::FailedPreconditionError(
            absl::StrCat("worker ", rank, " pushed a row of key ", key, " of table '",
                         tables_[entry.table]->spec().name, "' that its pull for clock ", clock,
                         " did not ask for (BSP: a step pushes the rows it pulled)"));
      }
    }
  }
  return absl::OkStatus();
}

std::vector<std::vector<float>> Shard::ReadRowsLocked(const std::vector<SparseRows>& rows) const {
  std::vector<std::vector<float>> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const SparseTable& table = *tables_[rows[i].table];
    out[i].resize(rows[i].keys.size() * static_cast<size_t>(table.dim()));
    table.Read(rows[i].keys, absl::MakeSpan(out[i]));
  }
  return out;
}

std::vector<Shard::TableStatus> Shard::TableStatuses() const {
  absl::MutexLock lock(&mu_);
  std::vector<TableStatus> out;
  for (const auto& table : tables_) {
    out.push_back(TableStatus{table->spec().name, table->rows(), table->bytes(),
                              table->memory().capacity, table->counters()});
  }
  return out;
}

SparseCallTiming Shard::sparse_timing() const {
  absl::MutexLock lock(&mu_);
  return sparse_timing_;
}

}  // namespace ps
