#include "worker/job_evaluation.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/json_lines.h"
#include "common/base/status_macros.h"
#include "common/base/whole_file.h"
#include "spdlog/spdlog.h"
#include "worker/job_report.h"
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
  AddJobReport(reports, work, require_all, &out);
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
