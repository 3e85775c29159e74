#include "worker/step_accounting.h"

#include <utility>

#include "common/base/status_macros.h"

namespace ps {

namespace {

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }
int64_t Us(absl::Duration d) { return absl::ToInt64Microseconds(d); }

}  // namespace

StepAccounting::StepAccounting(StepAccountingOptions options, JsonLinesWriter* metrics,
                               TrainStats& stats, LiveCounters& live)
    : options_(std::move(options)),
      metrics_(metrics),
      stats_(stats),
      live_(live),
      start_(absl::Now()),
      epoch_start_(start_) {}

absl::Status StepAccounting::Finish(const CompletedStep& done) {
  const absl::Duration pull = done.computing - done.start;
  const absl::Duration compute = done.computed - done.computing;
  const absl::Duration push = done.end - done.pushing;
  live_.steps.fetch_add(1);
  live_.samples.fetch_add(done.batch.count);
  live_.step.store(done.step);
  live_.pull_us.fetch_add(Us(pull));
  live_.server_wait_us.fetch_add(Us(done.pulled.server_wait));
  live_.compute_us.fetch_add(Us(compute));
  live_.push_us.fetch_add(Us(push));
  live_.step_us.fetch_add(Us(done.end - done.start));
  live_.dropped.fetch_add(done.pushed.dropped);
  if (done.pushed.max_staleness > live_.max_staleness.load()) {
    live_.max_staleness.store(done.pushed.max_staleness);  // only this thread writes it
  }
  stats_.steps += 1;
  stats_.samples += done.batch.count;
  stats_.pull += pull;
  stats_.compute += compute;
  stats_.injected += done.pushing - done.computed;
  stats_.push += push;
  stats_.push_bytes += done.pushed.payload_bytes;
  stats_.pull_bytes += done.pulled.payload_bytes;
  stats_.total += done.end - done.start;
  last_push_ = push;
  epoch_loss_ += done.batch.loss_sum;
  epoch_samples_ += done.batch.count;
  RETURN_IF_ERROR(WriteStepLine(done));

  const int64_t step = done.step;
  const bool epoch_end = (step + 1) % options_.steps_per_epoch == 0;
  const bool periodic = options_.evaluate_every > 0 && (step + 1) % options_.evaluate_every == 0;
  if (periodic && !epoch_end) RETURN_IF_ERROR(EvaluatePeriodically(step));
  // After a rejoin the worker may pass an epoch's end again: report each epoch once.
  const int64_t epochs_done = (step + 1) / options_.steps_per_epoch;
  if (epoch_end && epochs_done > reported_epochs_ && options_.evaluate_each_epoch) {
    reported_epochs_ = epochs_done;
    RETURN_IF_ERROR(ReportEpoch(step));
  }
  if (epoch_end) {
    epoch_start_ = absl::Now();
    epoch_loss_ = 0.0;
    epoch_samples_ = 0;
  }
  return absl::OkStatus();
}

absl::Status StepAccounting::WriteStepLine(const CompletedStep& done) {
  if (metrics_ == nullptr) return absl::OkStatus();
  JsonObject line;
  line.Add("kind", "step")
      .Add("rank", options_.rank)
      .Add("step", done.step)
      .Add("epoch", done.step / options_.steps_per_epoch + 1)
      .Add("loss", done.batch.loss_sum / done.batch.count)
      .Add("accuracy", done.batch.correct / done.batch.count)
      .Add("samples", done.batch.count)
      .Add("step_ms", Ms(done.end - done.start))
      .Add("pull_ms", Ms(done.computing - done.start))
      .Add("compute_ms", Ms(done.computed - done.computing))
      .Add("injected_ms", Ms(done.pushing - done.computed))
      .Add("push_ms", Ms(done.end - done.pushing))
      .Add("server_wait_ms", Ms(done.pulled.server_wait))
      .Add("staleness", done.pushed.max_staleness)
      .Add("dropped", done.pushed.dropped)
      .Add("late", done.pushed.late)
      .Add("push_bytes", done.pushed.payload_bytes)
      .Add("pull_bytes", done.pulled.payload_bytes);
  if (done.unique_keys >= 0) line.Add("unique_keys", done.unique_keys);
  if (done.batch.grad_norm >= 0) line.Add("grad_norm", done.batch.grad_norm);
  line.Add("wall_s", absl::ToDoubleSeconds(absl::Now() - start_));
  return metrics_->Write(line);
}

absl::Status StepAccounting::EvaluatePeriodically(int64_t step) {
  if (!options_.evaluate || metrics_ == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(const FreshEvaluation fresh, options_.evaluate(step));
  JsonObject line;
  line.Add("kind", "eval")
      .Add("rank", options_.rank)
      .Add("step", step + 1)
      .Add("updates", fresh.updates)
      .Add("test_loss", fresh.test.loss_sum / fresh.test.count)
      .Add("test_accuracy", fresh.test.correct / fresh.test.count);
  if (fresh.test.auc >= 0) line.Add("test_auc", fresh.test.auc);
  line.Add("wall_s", absl::ToDoubleSeconds(absl::Now() - start_));
  return metrics_->Write(line);
}

absl::Status StepAccounting::ReportEpoch(int64_t step) {
  if (!options_.evaluate) return absl::OkStatus();
  ASSIGN_OR_RETURN(const FreshEvaluation fresh, options_.evaluate(step));
  const absl::Time now = absl::Now();
  EpochReport report;
  report.epoch = static_cast<int>((step + 1) / options_.steps_per_epoch);
  report.epochs = options_.epochs;
  report.train_loss = epoch_samples_ > 0 ? epoch_loss_ / epoch_samples_ : 0.0;
  report.test_loss = fresh.test.loss_sum / fresh.test.count;
  report.test_accuracy = fresh.test.correct / fresh.test.count;
  report.test_auc = fresh.test.auc;
  report.samples_per_sec =
      epoch_samples_ * options_.num_workers / absl::ToDoubleSeconds(now - epoch_start_);
  report.elapsed = now - start_;
  if (metrics_ != nullptr) {
    JsonObject line;
    line.Add("kind", "epoch")
        .Add("rank", options_.rank)
        .Add("epoch", report.epoch)
        .Add("step", step + 1)
        .Add("updates", fresh.updates)
        .Add("train_loss", report.train_loss)
        .Add("test_loss", report.test_loss)
        .Add("test_accuracy", report.test_accuracy);
    if (report.test_auc >= 0) line.Add("test_auc", report.test_auc);
    line.Add("samples_per_sec", report.samples_per_sec)
        .Add("wall_s", absl::ToDoubleSeconds(report.elapsed));
    RETURN_IF_ERROR(metrics_->Write(line));
  }
  if (options_.on_epoch) options_.on_epoch(report);
  return absl::OkStatus();
}

}  // namespace ps
