#include "worker/job_evaluation.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/json_lines.h"
#include "common/base/status_macros.h"
#include "common/base/whole_file.h"
#include "spdlog/spdlog.h"
#include "worker/trainer.h"
#include "worker/work_account.h"

namespace ps {

namespace {

// How long new workers get to register when the job is found finished at once.
constexpr absl::Duration kRerunGrace = absl::Seconds(5);

// Waits until no worker can add to the result (AccountWork's job_done), up to `timeout`.
absl::StatusOr<std::vector<ShardReport>> WaitForJob(ParameterClient& client, absl::Duration timeout,
                                                    const std::atomic<bool>& stop) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Time next_report = absl::Now();
  for (bool first = true;; first = false) {
    ASSIGN_OR_RETURN(std::vector<ShardReport> reports, client.Status());
    const WorkAccount account = AccountWork(reports);
    if (account.job_done && first && timeout > absl::ZeroDuration()) {
      // Done before this evaluation began waiting: a finished job, or one started again over
      // finished shards whose new workers have yet to register (and be flagged as a rerun).
      absl::SleepFor(kRerunGrace);
      return client.Status();
    }
    if (account.job_done || timeout <= absl::ZeroDuration()) return reports;
    std::string waiting;
    for (const WorkerWork& w : account.workers) {
      if (w.state == "live" || w.state == "pending") {
        absl::StrAppend(&waiting, waiting.empty() ? "" : ", ", w.rank, " (", w.state, ")");
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the job did not finish within ", absl::ToDoubleSeconds(timeout),
          "s; workers still expected: ", waiting.empty() ? "none declared work yet" : waiting));
    }
    if (absl::Now() >= next_report) {
      spdlog::info("waiting for the job to finish; workers still training: {}",
                   waiting.empty() ? "none has declared its work yet" : waiting);
      next_report = absl::Now() + absl::Seconds(30);
    }
    if (stop.load()) return absl::CancelledError("stopped while waiting for the job");
    absl::SleepFor(absl::Seconds(1));
  }
}

// A job started again over shards that hold a finished one (still running, or restored from
// their checkpoints) trains nothing: its result would be the old one.
absl::Status CheckTheResultIsNew(const std::vector<ShardReport>& reports, const WorkAccount& work) {
  bool restored_unchanged = work.finished_at_restore;
  bool rerun = false;
  for (const ShardReport& r : reports) {
    restored_unchanged &= r.version == r.restored_version;
    rerun |= r.finished_job_rerun;
  }
  if (!restored_unchanged && !rerun) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the shards hold a job that had already finished before ",
      rerun ? "this run's workers started" : "they restarted",
      ", and nothing was trained since: its result is not new. To train afresh, start fresh "
      "shards (docker-compose: `down -v` deletes their checkpoints; ps_launch: another "
      "--checkpoint_root)"));
}

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

void PrintResult(const BatchStats& stats, int64_t max_staleness, const WorkAccount& work) {
  if (stats.auc >= 0) {
    std::printf("test_accuracy %.4f  test_auc %.4f  test_logloss %.4f  max_staleness %lld\n",
                stats.correct / stats.count, stats.auc, stats.loss_sum / stats.count,
                static_cast<long long>(max_staleness));
  } else {
    std::printf("test_accuracy %.4f  test_loss %.4f  max_staleness %lld\n",
                stats.correct / stats.count, stats.loss_sum / stats.count,
                static_cast<long long>(max_staleness));
  }
  std::printf("work: %lld of %lld gradients applied, %lld samples skipped\n",
              static_cast<long long>(work.gradients_applied),
              static_cast<long long>(work.gradients_expected),
              static_cast<long long>(work.samples_skipped));
  for (const WorkerWork& w : work.workers) {
    if (w.samples_skipped == 0) continue;
    std::printf("work: worker %d (%s) skipped %lld steps, %lld samples\n", w.rank, w.state.c_str(),
                static_cast<long long>(w.steps_skipped), static_cast<long long>(w.samples_skipped));
  }
  std::fflush(stdout);
}

}  // namespace

absl::StatusOr<bool> EvaluateJob(Model& model, Device& device, ParameterClient& client,
                                 const Dataset& test, const JobEvaluationOptions& options,
                                 const std::atomic<bool>& stop) {
  ASSIGN_OR_RETURN(const std::vector<ShardReport> reports,
                   WaitForJob(client, options.wait_for_job, stop));
  const WorkAccount work = AccountWork(reports);
  RETURN_IF_ERROR(CheckTheResultIsNew(reports, work));
  // BSP with backup workers leaves the late pushes out by design.
  ASSIGN_OR_RETURN(
      const bool require_all,
      options.require_all_work(!reports.empty() && reports[0].mode == ConsistencyMode::kBsp &&
                               reports[0].backup_workers == 0));
  const int64_t n = model.layout().total();
  std::vector<float> params(n);
  RETURN_IF_ERROR(client.Pull(0, /*no_wait=*/true, absl::MakeSpan(params)).status());
  ASSIGN_OR_RETURN(DeviceBuffer params_dev, device.Allocate(n * sizeof(float)));
  RETURN_IF_ERROR(device.CopyToDevice(params.data(), n * sizeof(float), params_dev.as<float>()));
  ASSIGN_OR_RETURN(const BatchStats stats, EvaluateDataset(model, device, params_dev.as<float>(),
                                                           test, ObserverRows(client, 0)));

  JsonObject out;
  out.Add("test_accuracy", stats.correct / stats.count)
      .Add("final_loss", stats.loss_sum / stats.count)
      .Add("test_samples", stats.count)
      .Add("params", n);
  if (stats.auc >= 0) {  // a click model: its loss is the log-loss
    out.Add("test_auc", stats.auc).Add("test_logloss", stats.loss_sum / stats.count);
  }
  if (model.labels_per_sample() > 1) {  // a language model: nats per token of the held-out text
    out.Add("val_loss", stats.loss_sum / stats.count).Add("val_tokens", stats.count);
  }
  AddWork(work, require_all, &out);
  AddShardTotals(reports, &out);
  AddSparseTotals(reports, &out);
  if (!options.summary_out.empty()) {
    const std::string text = out.str() + "\n";
    RETURN_IF_ERROR(WriteWholeFile(options.summary_out, text));
  }
  if (!options.weights_out.empty()) {
    RETURN_IF_ERROR(WriteWholeFile(options.weights_out, params));
  }
  int64_t max_staleness = 0;
  for (const ShardReport& r : reports) {
    for (const auto& w : r.workers) max_staleness = std::max(max_staleness, w.max_staleness);
  }
  PrintResult(stats, max_staleness, work);
  if (require_all && work.samples_skipped > 0) {
    spdlog::error(
        "{} samples were never trained ({} of {} gradients applied) and all work was required "
        "(--require_all_work)",
        work.samples_skipped, work.gradients_applied, work.gradients_expected);
    return false;
  }
  return true;
}

}  // namespace ps
