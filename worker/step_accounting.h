#ifndef PS_WORKER_STEP_ACCOUNTING_H_
#define PS_WORKER_STEP_ACCOUNTING_H_

// What a worker records for each step whose push was acknowledged, whatever schedule ran it:
// running totals (TrainStats, LiveCounters), the step's metrics line, and the evaluations and
// epoch reports due after it.

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/json_lines.h"
#include "common/nn/model.h"
#include "worker/parameter_client.h"

namespace ps {

// Per-epoch summary handed to the progress callback (rank 0 with evaluate_each_epoch).
struct EpochReport {
  int epoch = 0;  // 1-based
  // The run's length in epochs: fractional when it was given in steps (--steps 3000 at 937 steps
  // an epoch is 3.2; the last, partial epoch gets no report).
  double epochs = 0;
  double train_loss = 0.0;  // mean over this worker's samples of the epoch
  double test_loss = 0.0;
  double test_accuracy = 0.0;
  double test_auc = -1;          // logistic models (the test loss is then the log-loss); -1: none
  double samples_per_sec = 0.0;  // cluster estimate: this worker's rate x number of workers
  absl::Duration elapsed;        // since training started
};

// Where a worker's time went, summed over the steps it ran.
struct TrainStats {
  int64_t steps = 0;
  int64_t samples = 0;      // predictions: samples times their labels (a text window's tokens)
  absl::Duration pull;      // waiting for and receiving weights
  absl::Duration compute;   // forward, backward, host<->device copies
  absl::Duration injected;  // sleeps added by DelayOptions before the push
  absl::Duration push;      // sending gradients
  absl::Duration total;     // the steps' wall time (excludes evaluation)
  int64_t rejoins = 0;      // re-registrations after ABORTED answers
  int64_t push_bytes = 0;   // tensor bytes pushed (after compression)
  int64_t pull_bytes = 0;   // tensor bytes pulled
};

// Running totals of a training run, readable from another thread while it runs (the /metrics
// endpoint). Durations in microseconds.
struct LiveCounters {
  std::atomic<int64_t> steps{0};
  std::atomic<int64_t> samples{0};
  std::atomic<int64_t> step{-1};  // the last step completed
  std::atomic<int64_t> pull_us{0};
  std::atomic<int64_t> server_wait_us{0};  // part of pull_us the shards held the pulls
  std::atomic<int64_t> compute_us{0};
  std::atomic<int64_t> push_us{0};
  std::atomic<int64_t> step_us{0};
  std::atomic<int64_t> max_staleness{0};
  std::atomic<int64_t> dropped{0};
  std::atomic<int64_t> rejoins{0};
};

// One step, its push acknowledged. The times split it into pull (start..computing), compute
// (computing..computed), injected delay (computed..pushing) and push (pushing..end).
struct CompletedStep {
  int64_t step = 0;
  PullStats pulled;
  PushStats pushed;
  BatchStats batch;
  absl::Time start, computing, computed, pushing, end;
  int64_t unique_keys = -1;  // a sparse model's distinct rows of the step; -1: a dense model
};

// The test set's loss and accuracy on the shards' freshest weights, and the point of the run
// they were read at: the largest shard version, the steps this rank had finished, and the time
// (its metrics line's updates, step and wall_s). An evaluation beside training reads later than
// the step that asked for it.
struct FreshEvaluation {
  BatchStats test;
  int64_t updates = 0;
  int64_t steps_done = 0;
  absl::Time read_at = absl::Now();
};

struct StepAccountingOptions {
  int rank = 0;
  double epochs = 0;  // EpochReport::epochs
  int64_t steps_per_epoch = 1;
  int num_workers = 1;
  bool evaluate_each_epoch = false;  // needs `evaluate`
  int64_t evaluate_every = 0;        // steps; 0: never; needs `evaluate` and a metrics writer
  // Evaluates the freshest weights after `step`; empty: no evaluation. It must not touch the
  // buffers a schedule computes in.
  std::function<absl::StatusOr<FreshEvaluation>(int64_t step)> evaluate;
  std::function<void(const EpochReport&)> on_epoch;  // may be empty
  // Evaluate on a thread of StepAccounting's own instead of the training thread's. Under SSP and
  // ASP an evaluation that pauses its rank makes the rank's next gradient stale by every update
  // the others push meanwhile: the staleness a run measures would be partly the measurement's.
  // `evaluate` and `on_epoch` then run on that thread, one evaluation at a time, and `evaluate`
  // must use a model and device of its own. A periodic evaluation that falls due while another
  // waits to start replaces it (the replaced ones are counted and logged); epoch reports always
  // run, in order.
  bool evaluate_in_background = false;
};

// Not thread-safe: the training thread calls Finish in step order.
class StepAccounting {
 public:
  // `stats` and `live` must outlive this; `metrics` may be null. Training starts now.
  StepAccounting(StepAccountingOptions options, JsonLinesWriter* metrics, TrainStats& stats,
                 LiveCounters& live);
  // Waits for the evaluation that runs, if any; the ones still waiting are dropped (a run that
  // ends well calls FinishEvaluations first).
  ~StepAccounting();

  // Records `done`, writes its metrics line and runs the evaluations due after it (in the
  // background: starts them). The first error of a background evaluation is returned here, by
  // the next call after it.
  absl::Status Finish(const CompletedStep& done);
  // Runs every evaluation still waiting and returns the first error of any; the end of a run.
  absl::Status FinishEvaluations();

  absl::Time start() const { return start_; }
  // The push time of the step finished last (zero before any): a DelayInjector's input.
  absl::Duration last_push() const { return last_push_; }

 private:
  // An evaluation due after `step`: a periodic one, or an epoch's report with what the
  // training side knows of the epoch filled in at the step.
  struct EvaluationRequest {
    int64_t step = 0;
    bool epoch = false;
    EpochReport report;
  };

  absl::Status WriteStepLine(const CompletedStep& done);
  absl::Status RequestEvaluation(EvaluationRequest request);
  // Evaluates and writes the request's line (and calls on_epoch for an epoch's report).
  absl::Status Evaluate(EvaluationRequest request);
  void EvaluateInTheBackground();

  StepAccountingOptions options_;
  JsonLinesWriter* metrics_;
  TrainStats& stats_;
  LiveCounters& live_;
  const absl::Time start_;
  absl::Time epoch_start_;
  double epoch_loss_ = 0.0;
  int64_t epoch_samples_ = 0;
  int64_t reported_epochs_ = 0;
  absl::Duration last_push_;

  // The background evaluations (evaluate_in_background).
  absl::Mutex mu_;
  std::deque<EvaluationRequest> waiting_ ABSL_GUARDED_BY(mu_);
  bool evaluating_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status evaluation_error_ ABSL_GUARDED_BY(mu_);
  int64_t evaluations_replaced_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread evaluator_;  // started by the first request
};

}  // namespace ps

#endif  // PS_WORKER_STEP_ACCOUNTING_H_
