#include "worker/job_report.h"

#include <algorithm>

namespace ps {

namespace {

// The shards' counters and staleness statistics, summed over shards and workers.
void AddShardTotals(const std::vector<ShardReport>& reports, JsonObject* out) {
  std::vector<int64_t> histogram, versions, restored_versions;
  int64_t max_staleness = 0, rejected = 0, dropped = 0, late = 0, applied = 0;
  int64_t pushes_accepted = 0, pushes_duplicate = 0, pieces_received = 0, shared_payloads = 0;
  int64_t local_calls = 0;
  double staleness_sum = 0.0;
  for (const ShardReport& r : reports) {
    versions.push_back(r.version);
    rejected += r.rejected_nonfinite;
    pushes_accepted += r.pushes_accepted;
    pushes_duplicate += r.pushes_duplicate;
    pieces_received += r.pieces_received;
    shared_payloads += r.shared_memory_payloads;
    local_calls += r.local_calls;
    restored_versions.push_back(r.restored_version);
    for (const auto& w : r.workers) {
      max_staleness = std::max(max_staleness, w.max_staleness);
      dropped += w.dropped;
      late += w.late;
      applied += w.applied;
      staleness_sum += w.mean_staleness * w.applied;
      if (histogram.size() < w.staleness_counts.size()) histogram.resize(w.staleness_counts.size());
      for (size_t i = 0; i < w.staleness_counts.size(); ++i) histogram[i] += w.staleness_counts[i];
    }
  }
  out->Add("versions", versions)
      .Add("max_staleness", max_staleness)
      .Add("mean_staleness", applied > 0 ? staleness_sum / applied : 0.0)
      .Add("staleness_histogram", histogram)
      .Add("rejected_nonfinite", rejected)
      .Add("dropped_gradients", dropped)
      .Add("late_pushes", late)
      .Add("pushes_accepted", pushes_accepted)
      .Add("pushes_duplicate", pushes_duplicate)
      .Add("pieces_received", pieces_received)
      .Add("shared_memory_payloads", shared_payloads)
      .Add("local_calls", local_calls)
      .Add("restored_versions", restored_versions)
      .Add("decay_updates", reports.empty() ? int64_t{0} : reports[0].decay_updates);
}

// The sparse tables' size on each shard and the shards' time on rows (mean ms per call).
void AddSparseTotals(const std::vector<ShardReport>& reports, JsonObject* out) {
  if (reports.empty() || reports[0].tables.empty()) return;
  std::vector<int64_t> rows, bytes;
  int64_t admissions = 0, evictions = 0, not_admitted = 0;
  SparseCallTiming timing;
  for (const ShardReport& r : reports) {
    int64_t shard_rows = 0, shard_bytes = 0;
    for (const SparseTableStatus& t : r.tables) {
      shard_rows += t.rows;
      shard_bytes += t.bytes;
      admissions += t.counters.admissions;
      evictions += t.counters.evictions;
      not_admitted += t.counters.not_admitted;
    }
    rows.push_back(shard_rows);
    bytes.push_back(shard_bytes);
    timing.pulls += r.sparse_timing.pulls;
    timing.pull_seconds += r.sparse_timing.pull_seconds;
    timing.pushes += r.sparse_timing.pushes;
    timing.push_seconds += r.sparse_timing.push_seconds;
  }
  out->Add("rows_per_shard", rows)
      .Add("bytes_per_shard", bytes)
      .Add("row_admissions", admissions)
      .Add("row_evictions", evictions)
      .Add("row_gradients_not_admitted", not_admitted)
      .Add("sparse_pull_ms", timing.pulls > 0 ? 1000.0 * timing.pull_seconds / timing.pulls : 0.0)
      .Add("sparse_push_ms",
           timing.pushes > 0 ? 1000.0 * timing.push_seconds / timing.pushes : 0.0);
}

// The work account: totals, and per worker as a JSON array.
void AddWork(const WorkAccount& work, bool require_all, JsonObject* out) {
  std::vector<JsonObject> per_worker;
  for (const WorkerWork& w : work.workers) {
    JsonObject& o = per_worker.emplace_back();
    ForEachReportedField(w, [&o](const char* name, const auto& value) { o.Add(name, value); });
  }
  out->Add("gradients_expected", work.gradients_expected)
      .Add("gradients_applied", work.gradients_applied)
      .Add("samples_skipped", work.samples_skipped)
      .Add("require_all_work", require_all)
      .Add("work", per_worker);
}

}  // namespace

void AddJobReport(const std::vector<ShardReport>& reports, const WorkAccount& work,
                  bool require_all, JsonObject* out) {
  AddWork(work, require_all, out);
  AddShardTotals(reports, out);
  AddSparseTotals(reports, out);
}

}  // namespace ps
