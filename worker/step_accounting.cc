#include "worker/step_accounting.h"

#include <utility>

#include "common/base/status_macros.h"
#include "spdlog/spdlog.h"

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

StepAccounting::~StepAccounting() {
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    waiting_.clear();
  }
  if (evaluator_.joinable()) evaluator_.join();
}

absl::Status StepAccounting::Finish(const CompletedStep& done) {
  if (options_.evaluate_in_background) {
    absl::MutexLock lock(&mu_);
    // Taken, so that an ABORTED one (a rejoin) does not come back after the rejoin.
    RETURN_IF_ERROR(std::exchange(evaluation_error_, absl::OkStatus()));
  }
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
  if (periodic && !epoch_end && options_.evaluate && metrics_ != nullptr) {
    RETURN_IF_ERROR(RequestEvaluation({step, /*epoch=*/false, EpochReport()}));
  }
  // After a rejoin the worker may pass an epoch's end again: report each epoch once.
  const int64_t epochs_done = (step + 1) / options_.steps_per_epoch;
  if (epoch_end && epochs_done > reported_epochs_ && options_.evaluate_each_epoch &&
      options_.evaluate) {
    reported_epochs_ = epochs_done;
    const absl::Time now = absl::Now();
    EvaluationRequest request{step, /*epoch=*/true, EpochReport()};
    EpochReport& report = request.report;
    report.epoch = static_cast<int>(epochs_done);
    report.epochs = options_.epochs;
    report.train_loss = epoch_samples_ > 0 ? epoch_loss_ / epoch_samples_ : 0.0;
    report.samples_per_sec =
        epoch_samples_ * options_.num_workers / absl::ToDoubleSeconds(now - epoch_start_);
    report.elapsed = now - start_;
    RETURN_IF_ERROR(RequestEvaluation(std::move(request)));
  }
  if (epoch_end) {
    epoch_start_ = absl::Now();
    epoch_loss_ = 0.0;
    epoch_samples_ = 0;
  }
  return absl::OkStatus();
}

absl::Status StepAccounting::RequestEvaluation(EvaluationRequest request) {
  if (!options_.evaluate_in_background) return Evaluate(std::move(request));
  absl::MutexLock lock(&mu_);
  if (!request.epoch && !waiting_.empty() && !waiting_.back().epoch) {
    waiting_.back() = std::move(request);
    ++evaluations_replaced_;
  } else {
    waiting_.push_back(std::move(request));
  }
  if (!evaluator_.joinable()) evaluator_ = std::thread([this] { EvaluateInTheBackground(); });
  return absl::OkStatus();
}

void StepAccounting::EvaluateInTheBackground() {
  absl::MutexLock lock(&mu_);
  for (;;) {
    mu_.Await(absl::Condition(
        +[](StepAccounting* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
          return self->closing_ || !self->waiting_.empty();
        },
        this));
    if (waiting_.empty()) return;  // closing
    EvaluationRequest request = std::move(waiting_.front());
    waiting_.pop_front();
    evaluating_ = true;
    mu_.Unlock();
    const absl::Status s = Evaluate(std::move(request));
    mu_.Lock();
    evaluating_ = false;
    if (evaluation_error_.ok()) evaluation_error_ = s;
  }
}

absl::Status StepAccounting::FinishEvaluations() {
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](StepAccounting* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
          return self->waiting_.empty() && !self->evaluating_;
        },
        this));
    closing_ = true;
  }
  if (evaluator_.joinable()) evaluator_.join();
  absl::MutexLock lock(&mu_);
  if (evaluations_replaced_ > 0) {
    spdlog::warn(
        "rank {}: {} periodic evaluations were replaced by later ones: each took longer than "
        "--eval_every steps of training",
        options_.rank, evaluations_replaced_);
  }
  return evaluation_error_;
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

absl::Status StepAccounting::Evaluate(EvaluationRequest request) {
  ASSIGN_OR_RETURN(const FreshEvaluation fresh, options_.evaluate(request.step));
  const double wall_s = absl::ToDoubleSeconds(fresh.read_at - start_);
  const double test_loss = fresh.test.loss_sum / fresh.test.count;
  const double test_accuracy = fresh.test.correct / fresh.test.count;
  if (!request.epoch) {
    JsonObject line;
    line.Add("kind", "eval")
        .Add("rank", options_.rank)
        .Add("step", fresh.steps_done)
        .Add("requested_step", request.step + 1)
        .Add("updates", fresh.updates)
        .Add("test_loss", test_loss)
        .Add("test_accuracy", test_accuracy);
    if (fresh.test.auc >= 0) line.Add("test_auc", fresh.test.auc);
    line.Add("wall_s", wall_s);
    return metrics_->Write(line);
  }
  EpochReport& report = request.report;
  report.test_loss = test_loss;
  report.test_accuracy = test_accuracy;
  report.test_auc = fresh.test.auc;
  if (metrics_ != nullptr) {
    JsonObject line;
    line.Add("kind", "epoch")
        .Add("rank", options_.rank)
        .Add("epoch", report.epoch)
        .Add("step", fresh.steps_done)
        .Add("requested_step", request.step + 1)
        .Add("updates", fresh.updates)
        .Add("train_loss", report.train_loss)
        .Add("test_loss", report.test_loss)
        .Add("test_accuracy", report.test_accuracy);
    if (report.test_auc >= 0) line.Add("test_auc", report.test_auc);
    line.Add("samples_per_sec", report.samples_per_sec).Add("wall_s", wall_s);
    RETURN_IF_ERROR(metrics_->Write(line));
  }
  if (options_.on_epoch) options_.on_epoch(report);
  return absl::OkStatus();
}

}  // namespace ps
