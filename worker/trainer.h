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
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/json_lines.h"
#include "common/data/dataset.h"
#include "common/device/device.h"
#include "common/nn/model.h"
#include "worker/batch_plan.h"
#include "worker/delay_injector.h"
#include "worker/parameter_client.h"
#include "worker/step_accounting.h"
#include "worker/step_gradient.h"
#include "worker/step_schedule.h"

namespace ps {

struct TrainerOptions {
  int rank = 0;
  int batch_size = 32;  // per micro-batch
  int accumulate = 1;   // micro-batches per push
  int epochs = 5;
  int64_t steps = 0;     // global steps to train instead of `epochs`; 0: epochs
  double clip_norm = 0;  // StepGradient::set_clip_norm; 0: off
  uint64_t seed = 1;     // fixes the initial weights and every epoch's sample order
  DelayOptions delays;   // injected slowness (straggler, jitter, pause); none by default
  bool evaluate_each_epoch = false;  // measure test accuracy at each epoch end (rank 0)
  int64_t evaluate_every = 0;        // also every this many steps (0: never); "eval" metric lines
  int eval_batch = 1000;             // rows per forward pass when evaluating
  absl::Duration register_timeout = absl::Seconds(60);  // wait this long for the shards
  // A call answered ABORTED (lease expired, shard restarted, rank taken over) makes the worker
  // register again and resume at the shards' clock; more than this many times fails the run.
  int max_rejoins = 100;
  // The schedule the flags ask for (overlap, asynchronous pushes, PushPull, priority; see
  // ScheduleRequest); ChooseSchedule picks the one that serves it in the cluster's mode.
  ScheduleRequest schedule;
  // Priority scheduling: a layer with fewer parameters than this travels with the layer before
  // it (a call per tiny layer costs more than it hides); 0: one part per layer.
  int64_t priority_min_part = 16384;
  // A GPU worker copies each layer's weights and gradient on a stream of its own while other
  // layers compute (StepGradient's overlap_copies); false: one copy each way around the step.
  bool overlap_copies = true;
  // Stop (successfully) after this much training time, whatever step was reached.
  absl::Duration max_duration = absl::InfiniteDuration();
  // Evaluate on the training thread under SSP and ASP too, pausing this rank while the others
  // push (as BSP always does, where the others wait for it at the round and the weights an
  // evaluation reads are exactly those after the step's round). False: with an evaluation
  // replica (UseEvaluationReplica), SSP and ASP evaluate on a thread of their own.
  bool evaluate_inline = false;
};

class Trainer {
 public:
  // All references must outlive the trainer. `test` may be null when no evaluation is wanted;
  // `metrics` may be null.
  Trainer(const TrainerOptions& options, Model& model, Device& device, ParameterClient& client,
          const Dataset& train, const Dataset* test, JsonLinesWriter* metrics,
          std::function<void(const EpochReport&)> on_epoch);

  // Makes a copy of the model on the device it is given.
  using ReplicaFactory = std::function<absl::StatusOr<std::unique_ptr<Model>>(Device& device)>;
  // SSP and ASP (unless evaluate_inline) evaluate beside training, with a copy of the model
  // that `make` builds on `device` once Run knows the mode: a BSP run never builds one (a CNN's
  // buffers for an evaluation batch of 1000 are some 660 MiB). `device` must outlive the
  // trainer. Without a factory, every evaluation runs on the training thread with the training
  // model.
  void UseEvaluationReplica(Device& device, ReplicaFactory make) {
    eval_dev_ = &device;
    make_replica_ = std::move(make);
  }

  // Trains to the end. Returns CANCELLED when `stop` becomes true, or the first error.
  absl::Status Run(const std::atomic<bool>& stop);
  const TrainStats& stats() const { return stats_; }
  // Safe to read from any thread while Run() runs.
  const LiveCounters& live() const { return live_; }

 private:
  // Test-set loss and accuracy of the shards' current weights by `model` on `device` (an
  // observer read into `params`, then onto the device), the largest shard version read and when.
  absl::StatusOr<FreshEvaluation> EvaluateFresh(int64_t step, Model& model, Device& device,
                                                absl::Span<float> params, float* params_dev);
  // Where this rank's samples come from in a cluster of `num_workers`.
  BatchPlanOptions PlanOptions(int num_workers) const;
  // Declares the work this worker owes (see ParameterClient::SetWorkPlan) and says when there
  // is none left.
  void DeclareWork(const ClusterInfo& cluster, int64_t total_steps);
  // The accounting's options; evaluations read the shards' weights into buffers of their own,
  // allocated here when a test set is given.
  absl::StatusOr<StepAccountingOptions> AccountingOptions(const ClusterInfo& cluster,
                                                          int64_t steps_per_epoch);
  // The schedule the options ask for in the cluster's mode (what it leaves out is logged);
  // INVALID_ARGUMENT where it cannot serve this model or clipping.
  absl::StatusOr<Schedule> PickSchedule(const ClusterInfo& cluster) const;
  // The start line of the log and of the metrics (one JSON line "kind": "start").
  absl::Status AnnounceStart(const ClusterInfo& cluster, const BatchPlan& plan, int64_t total_steps,
                             Schedule schedule);
  // The injected delays, seeded by the job's seed and this rank.
  DelayOptions SeededDelays() const;
  // The client's Register, with the refusals no restart fixes as AsJoinError's.
  absl::StatusOr<ClusterInfo> Register();
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
  // Evaluation's own buffers: the freshest weights on the host and on the device.
  DeviceBuffer eval_host_, eval_device_;
  Device* eval_dev_ = nullptr;
  ReplicaFactory make_replica_;
  std::unique_ptr<Model> eval_model_;  // made by make_replica_ when first needed
};

// INVALID_ARGUMENT naming the options that cannot go together or are out of range (also
// checked by Trainer::Run before anything else).
absl::Status ValidateTrainerOptions(const TrainerOptions& options);

// Register and Init answer FAILED_PRECONDITION when the shards hold another model's layout or
// form another cluster than the one the worker was given (another --servers order, shard count
// or consistency mode): no restart of the worker fixes that, so this returns it as
// INVALID_ARGUMENT, the worker's configuration error (exit 2). Any other status is returned as
// it is.
absl::Status AsJoinError(const absl::Status& status);

// Fetches the current values of a sparse table's rows: keys.size() x dim into `values`.
using RowSource =
    std::function<absl::Status(absl::Span<const uint64_t> keys, absl::Span<float> values)>;

// Observer reads of the rows of the model's sparse table from `client`'s shards, as they are now
// (for step `clock`), rows alone (ParameterClient::PullRows). `client` must outlive the source.
RowSource ObserverRows(ParameterClient& client, int64_t clock);

// Loss and accuracy of `params` (device memory, the model's layout) over all of `data`; for a
// logistic model also the AUC. A model with a sparse table needs `rows` (FAILED_PRECONDITION
// otherwise), asked once per batch of max_batch() samples.
absl::StatusOr<BatchStats> EvaluateDataset(Model& model, Device& device, const float* params,
                                           const Dataset& data, const RowSource& rows = nullptr);

}  // namespace ps

#endif  // PS_WORKER_TRAINER_H_
