#ifndef PS_WORKER_TRAINER_H_
#define PS_WORKER_TRAINER_H_

// The worker's training loop. Per step c: pull every shard's slice for clock c, run forward and
// backward over `accumulate` micro-batches of this rank's share of global batch c, push the mean
// gradient with the versions it was computed from. Rank 0 also measures test accuracy at each
// epoch end on the freshest weights. The worker keeps no state that must survive it: it resumes
// at the clock the shards report, and the samples of step c depend only on (seed, rank, c).

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/dataset.h"
#include "common/device.h"
#include "common/json_lines.h"
#include "common/model.h"
#include "worker/delay_injector.h"
#include "worker/parameter_client.h"
#include "worker/step_gradient.h"
#include "worker/task_pool.h"

namespace ps {

struct TrainerOptions {
  int rank = 0;
  int batch_size = 32;  // per micro-batch
  int accumulate = 1;   // micro-batches per push
  int epochs = 5;
  uint64_t seed = 1;    // fixes the initial weights and every epoch's sample order
  DelayOptions delays;  // injected slowness (straggler, jitter, pause); none by default
  bool evaluate_each_epoch = false;  // measure test accuracy at each epoch end (rank 0)
  int64_t evaluate_every = 0;        // also every this many steps (0: never); "eval" metric lines
  int eval_batch = 1000;             // rows per forward pass when evaluating
  absl::Duration register_timeout = absl::Seconds(60);  // wait this long for the shards
  // A call answered ABORTED (lease expired, shard restarted, rank taken over) makes the worker
  // register again and resume at the shards' clock; more than this many times fails the run.
  int max_rejoins = 100;
  // SSP and ASP: pull the next step's weights while this step computes and pushes. The gradient of
  // step c is then computed from weights that may lack this worker's own gradient of step c-1
  // (one more update of staleness, still within the SSP bound the shards enforce on every pull).
  bool overlap = false;
  // SSP and ASP: push step c's gradient on another thread while step c+1 pulls and computes; it
  // is waited for after that compute, before step c+1's push. The gradient of step c+1 may then
  // miss this worker's own gradient of step c (one more update of staleness, within the SSP bound
  // the shards enforce). A step's push time is what the worker waited for it. With `overlap` the
  // pull, the compute and the push of three consecutive steps run at once.
  bool async_push = false;
  // Steps that run one after another (no `overlap`, `async_push` or `priority`) push step c and
  // pull step c+1 in one round trip per shard (ParameterClient::PushPull). The shards do exactly
  // what a Push and then a Pull would; a step's push time then includes the next step's pull,
  // whose own pull time is what remained of it (nothing).
  bool push_pull = true;
  // Priority scheduling (P3, BytePS), any mode: weights are pulled one layer per call, first layer
  // first, and each layer's forward starts as soon as its weights have arrived; each layer's
  // gradient is pushed as soon as backward has produced it, last layer first, while backward
  // goes on below. The shards apply a step only once all its pieces are in, so the results are
  // those of whole pushes (BSP: bit for bit). Not with `overlap` or injected delays.
  bool priority = false;
  // Priority scheduling: a layer with fewer parameters than this travels with the layer before
  // it (a call per tiny layer costs more than it hides); 0: one part per layer.
  int64_t priority_min_part = 16384;
  // A GPU worker copies each layer's weights and gradient on a stream of its own while other
  // layers compute (StepGradient's overlap_copies); false: one copy each way around the step.
  bool overlap_copies = true;
  // Stop (successfully) after this much training time, whatever step was reached.
  absl::Duration max_duration = absl::InfiniteDuration();
};

// Per-epoch summary handed to the progress callback (rank 0 with evaluate_each_epoch).
struct EpochReport {
  int epoch = 0;  // 1-based
  int epochs = 0;
  double train_loss = 0.0;  // mean over this worker's samples of the epoch
  double test_loss = 0.0;
  double test_accuracy = 0.0;
  double samples_per_sec = 0.0;  // cluster estimate: this worker's rate x number of workers
  absl::Duration elapsed;        // since training started
};

// Where a worker's time went, summed over the steps it ran.
struct TrainStats {
  int64_t steps = 0;
  int64_t samples = 0;
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

class Trainer {
 public:
  // All references must outlive the trainer. `test` may be null when no evaluation is wanted;
  // `metrics` may be null.
  Trainer(const TrainerOptions& options, Model& model, Device& device, ParameterClient& client,
          const Dataset& train, const Dataset* test, JsonLinesWriter* metrics,
          std::function<void(const EpochReport&)> on_epoch);

  // Trains to the end. Returns CANCELLED when `stop` becomes true, or the first error.
  absl::Status Run(const std::atomic<bool>& stop);
  const TrainStats& stats() const { return stats_; }
  // Safe to read from any thread while Run() runs.
  const LiveCounters& live() const { return live_; }

 private:
  // Test-set loss and accuracy of the shards' current weights (an observer read into `params`,
  // then onto the device); `updates` receives the largest shard version read.
  absl::StatusOr<BatchStats> EvaluateFresh(int64_t step, absl::Span<float> params,
                                           float* params_dev, int64_t* updates);
  // Where a priority-scheduled step spent its time on the training thread.
  struct StepTimes {
    absl::Duration pull;     // waiting for layers' weights
    absl::Duration compute;  // forward and backward, without those waits
    absl::Duration push;     // after backward, waiting for the last gradients to be acknowledged
  };
  // One step of priority scheduling (see TrainerOptions::priority): pulls on one helper thread,
  // pushes on another, computes on this one. The first error of the three is returned.
  absl::Status PriorityStep(int64_t step, StepGradient& gradient, absl::Span<float> params,
                            absl::Span<float> grads, int num_samples, PullStats* pulled,
                            PushStats* pushed, BatchStats* batch, StepTimes* times);
  // Registers again after `why` (an ABORTED answer) and returns where to resume; offers `params`
  // to shards that lost theirs.
  absl::StatusOr<ClusterInfo> Rejoin(const absl::Status& why, absl::Span<const float> params);

  TrainerOptions options_;
  Model& model_;
  Device& device_;
  ParameterClient& client_;
  const Dataset& train_;
  const Dataset* test_;
  JsonLinesWriter* metrics_;
  int64_t rejoins_ = 0;
  LiveCounters live_;
  std::function<void(const EpochReport&)> on_epoch_;
  TrainStats stats_;
  // Priority scheduling's puller and two pushers, kept from step to step.
  std::unique_ptr<TaskPool> step_threads_;
};

// INVALID_ARGUMENT naming the options that cannot go together or are out of range (also
// checked by Trainer::Run before anything else).
absl::Status ValidateTrainerOptions(const TrainerOptions& options);

// The parts priority scheduling sends: `layers` (contiguous key ranges in forward order), each
// layer of fewer than `min_part` keys joined to the part before it. The first layer always
// starts a part of its own: pulled first and pushed last, it is best small (forward starts
// sooner, the last push after backward is shorter).
std::vector<KeyRange> MergeParts(const std::vector<KeyRange>& layers, int64_t min_part);

// Loss and accuracy of `params` (device memory, the model's layout) over all of `data`.
absl::StatusOr<BatchStats> EvaluateDataset(Model& model, Device& device, const float* params,
                                           const Dataset& data);

}  // namespace ps

#endif  // PS_WORKER_TRAINER_H_
