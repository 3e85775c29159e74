#include "worker/trainer.h"

#include <algorithm>
#include <condition_variable>
#include <future>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/metrics/classification.h"
#include "common/nn/sparse_lookup.h"
#include "spdlog/spdlog.h"
#include "worker/batch_plan.h"
#include "worker/heartbeat_thread.h"
#include "worker/step_gradient.h"

namespace ps {

namespace {

// The width of the rows the model's sparse table holds; 0 for a model without one. A worker
// trains one table at most (ParamDescription may describe more).
int64_t SparseRowDim(const Model& model) {
  const std::vector<SparseTableSpec>& tables = model.description().sparse();
  return tables.empty() ? 0 : tables[0].dim;
}

// One evaluation batch's rows of the model's sparse table, fetched and bound to the model.
class EvaluationRows {
 public:
  static absl::StatusOr<EvaluationRows> Create(Model& model, Device& device, const Dataset& data,
                                               const RowSource& source) {
    EvaluationRows r(model, device, source);
    if (model.description().sparse().empty()) return r;
    if (!source) {
      return absl::FailedPreconditionError(
          absl::StrCat("evaluating ", model.name(), " needs its sparse table's rows"));
    }
    r.fields_ = data.keys_per_sample();
    r.dim_ = SparseRowDim(model);
    const int64_t lookups = int64_t{model.max_batch()} * r.fields_;
    ASSIGN_OR_RETURN(r.rows_dev_, device.Allocate(sizeof(float) * lookups * r.dim_));
    ASSIGN_OR_RETURN(r.lookups_dev_, device.Allocate(sizeof(int32_t) * lookups));
    return r;
  }

  // Binds the rows of samples `indices` (n of them) to the model.
  absl::Status Bind(const Dataset& data, const int32_t* indices, int n) {
    if (fields_ == 0) return absl::OkStatus();
    keys_.resize(static_cast<size_t>(n) * fields_);
    data.GatherKeys(indices, n, keys_.data());
    const SparseLookups s = DeduplicateKeys(keys_.data(), static_cast<int64_t>(keys_.size()));
    values_.resize(s.unique_keys.size() * dim_);
    RETURN_IF_ERROR(source_(s.unique_keys, absl::MakeSpan(values_)));
    RETURN_IF_ERROR(device_.CopyToDevice(values_.data(), values_.size() * sizeof(float),
                                         rows_dev_.as<float>()));
    RETURN_IF_ERROR(device_.CopyToDevice(s.lookups.data(), s.lookups.size() * sizeof(int32_t),
                                         lookups_dev_.as<int32_t>()));
    // Forward passes read rows and lookups only.
    batch_ = SparseBatch{rows_dev_.as<float>(),
                         static_cast<int64_t>(s.unique_keys.size()),
                         lookups_dev_.as<int32_t>(),
                         nullptr,
                         nullptr,
                         nullptr};
    model_.BindSparse(&batch_);
    return absl::OkStatus();
  }
  ~EvaluationRows() {
    if (fields_ > 0) model_.BindSparse(nullptr);
  }
  EvaluationRows(EvaluationRows&& other) noexcept
      : model_(other.model_),
        device_(other.device_),
        source_(other.source_),
        fields_(std::exchange(other.fields_, 0)),  // the moved-from one unbinds nothing
        dim_(other.dim_),
        rows_dev_(std::move(other.rows_dev_)),
        lookups_dev_(std::move(other.lookups_dev_)) {}

 private:
  EvaluationRows(Model& model, Device& device, const RowSource& source)
      : model_(model), device_(device), source_(source) {}
  Model& model_;
  Device& device_;
  const RowSource& source_;
  int fields_ = 0;
  int64_t dim_ = 0;
  std::vector<uint64_t> keys_;
  std::vector<float> values_;
  DeviceBuffer rows_dev_, lookups_dev_;
  SparseBatch batch_;
};

}  // namespace

RowSource ObserverRows(ParameterClient& client, int64_t clock) {
  return [&client, clock](absl::Span<const uint64_t> keys, absl::Span<float> values) {
    const RowsToPull asked{0, keys, values};
    return client.PullRows(clock, {&asked, 1});
  };
}

absl::StatusOr<BatchStats> EvaluateDataset(Model& model, Device& device, const float* params,
                                           const Dataset& data, const RowSource& rows) {
  const int batch = model.max_batch();
  const int64_t features = data.features();
  const int labels_per_sample = data.shape().labels;
  std::vector<float> x(static_cast<size_t>(batch) * features);
  std::vector<int32_t> y(static_cast<size_t>(batch) * labels_per_sample);
  std::vector<int32_t> indices(batch);
  ASSIGN_OR_RETURN(DeviceBuffer x_dev, device.Allocate(x.size() * sizeof(float)));
  ASSIGN_OR_RETURN(DeviceBuffer y_dev, device.Allocate(y.size() * sizeof(int32_t)));
  ASSIGN_OR_RETURN(EvaluationRows sparse, EvaluationRows::Create(model, device, data, rows));
  const bool logistic = model.loss() == Loss::kLogistic;
  std::vector<float> probabilities, batch_probabilities;
  std::vector<int32_t> labels;
  BatchStats total;
  for (int64_t begin = 0; begin < data.size(); begin += batch) {
    const int n = static_cast<int>(std::min<int64_t>(batch, data.size() - begin));
    std::iota(indices.begin(), indices.begin() + n, static_cast<int32_t>(begin));
    data.Gather(indices.data(), n, x.data(), y.data());
    RETURN_IF_ERROR(sparse.Bind(data, indices.data(), n));
    RETURN_IF_ERROR(device.CopyToDevice(x.data(), sizeof(float) * n * features, x_dev.as<float>()));
    RETURN_IF_ERROR(device.CopyToDevice(y.data(), sizeof(int32_t) * n * labels_per_sample,
                                        y_dev.as<int32_t>()));
    ASSIGN_OR_RETURN(BatchStats s,
                     model.Evaluate(params, x_dev.as<float>(), y_dev.as<int32_t>(), n));
    total.loss_sum += s.loss_sum;
    total.correct += s.correct;
    total.count += s.count;
    if (logistic) {
      batch_probabilities.resize(n);
      RETURN_IF_ERROR(
          device.CopyToHost(model.probabilities(), sizeof(float) * n, batch_probabilities.data()));
      probabilities.insert(probabilities.end(), batch_probabilities.begin(),
                           batch_probabilities.end());
      labels.insert(labels.end(), y.begin(), y.begin() + n);
    }
  }
  if (logistic) total.auc = RocAuc(probabilities, labels);
  return total;
}

Trainer::Trainer(const TrainerOptions& options, Model& model, Device& device,
                 ParameterClient& client, const Dataset& train, const Dataset* test,
                 JsonLinesWriter* metrics, std::function<void(const EpochReport&)> on_epoch)
    : options_(options),
      model_(model),
      device_(device),
      client_(client),
      train_(train),
      test_(test),
      metrics_(metrics),
      on_epoch_(std::move(on_epoch)) {}

absl::Status ValidateTrainerOptions(const TrainerOptions& options) {
  if (options.priority_min_part < 0) {
    return absl::InvalidArgumentError("the smallest priority part must be >= 0 parameters");
  }
  RETURN_IF_ERROR(ValidateDelayOptions(options.delays));
  if (options.schedule.priority) {
    const DelayOptions& d = options.delays;
    if (options.schedule.overlap || options.schedule.async_push) {
      return absl::InvalidArgumentError(
          "priority scheduling and overlap or asynchronous pushes are alternatives: choose one");
    }
    if (d.slowdown != 1.0 || d.jitter_probability > 0.0 || d.pause_step >= 0) {
      return absl::InvalidArgumentError(
          "priority scheduling sends gradients while backward runs, so injected delays (which "
          "stand for slower computation before the push) cannot apply: drop one or the other");
    }
  }
  return absl::OkStatus();
}

BatchPlanOptions Trainer::PlanOptions(int num_workers) const {
  BatchPlanOptions plan;
  plan.dataset_size = train_.size();
  plan.num_workers = num_workers;
  plan.rank = options_.rank;
  plan.batch_size = options_.batch_size;
  plan.accumulate = options_.accumulate;
  plan.seed = options_.seed;
  return plan;
}

void Trainer::DeclareWork(const ClusterInfo& cluster, int64_t total_steps) {
  if (cluster.resume_clock >= total_steps) {
    // Not an error of this process: it has nothing to do. Over a finished job the shards flag
    // the start, and the job's evaluation refuses to present the old result as a new one.
    spdlog::error(
        "rank {}: nothing to train: the shards hold step {} of this worker's {}{}. To train "
        "afresh, start fresh shards (docker-compose: `down -v`; ps_launch: another "
        "--checkpoint_root)",
        options_.rank, cluster.resume_clock, total_steps,
        cluster.job_finished ? " (a job that has finished)" : "");
  }
  // Declared before the first push (and with every later Register and Heartbeat): the shards
  // account for it, and an automatic cosine schedule ends with it. A failed beat is not fatal:
  // the next one declares it again.
  client_.SetWorkPlan(total_steps, int64_t{options_.batch_size} * options_.accumulate);
  if (absl::Status s = client_.Heartbeat(); !s.ok()) {
    spdlog::warn("rank {}: declaring the work plan: {}", options_.rank, s.ToString());
  }
}

absl::StatusOr<StepAccountingOptions> Trainer::AccountingOptions(const ClusterInfo& cluster,
                                                                 int64_t steps_per_epoch) {
  StepAccountingOptions o;
  o.rank = options_.rank;
  o.epochs =
      options_.steps > 0 ? static_cast<double>(options_.steps) / steps_per_epoch : options_.epochs;
  o.steps_per_epoch = steps_per_epoch;
  o.num_workers = cluster.num_workers;
  o.evaluate_each_epoch = options_.evaluate_each_epoch;
  o.evaluate_every = options_.evaluate_every;
  o.on_epoch = on_epoch_;
  if (test_ != nullptr) {
    // Under BSP the others wait at the round for an evaluating rank anyway, and the inline read
    // gets exactly the weights after the step's round.
    o.evaluate_in_background = (o.evaluate_each_epoch || o.evaluate_every > 0) &&
                               make_replica_ != nullptr && !options_.evaluate_inline &&
                               cluster.mode != ConsistencyMode::kBsp;
    if (o.evaluate_in_background && eval_model_ == nullptr) {
      ASSIGN_OR_RETURN(eval_model_, make_replica_(*eval_dev_));
    }
    Model& model = o.evaluate_in_background ? *eval_model_ : model_;
    Device& device = o.evaluate_in_background ? *eval_dev_ : device_;
    const int64_t n = model.layout().total();
    ASSIGN_OR_RETURN(eval_host_, device.AllocateHost(n * sizeof(float)));
    ASSIGN_OR_RETURN(eval_device_, device.Allocate(n * sizeof(float)));
    o.evaluate = [this, n, &model, &device](int64_t step) {
      return EvaluateFresh(step, model, device, absl::Span<float>(eval_host_.as<float>(), n),
                           eval_device_.as<float>());
    };
  }
  return o;
}

absl::Status AsJoinError(const absl::Status& status) {
  if (!absl::IsFailedPrecondition(status)) return status;
  return absl::InvalidArgumentError(
      absl::StrCat("the shards refuse this worker: ", status.message()));
}

absl::StatusOr<ClusterInfo> Trainer::Register() {
  absl::StatusOr<ClusterInfo> cluster = client_.Register(options_.rank, options_.register_timeout);
  if (!cluster.ok()) return AsJoinError(cluster.status());
  return cluster;
}

absl::StatusOr<Schedule> Trainer::PickSchedule(const ClusterInfo& cluster) const {
  const Schedule schedule = ChooseSchedule(options_.schedule, cluster.mode, cluster.staleness);
  const std::string shortfall =
      ScheduleShortfall(options_.schedule, cluster.mode, cluster.staleness);
  if (!shortfall.empty()) spdlog::warn("{}", shortfall);
  if (options_.clip_norm > 0 && schedule == Schedule::kPriority) {
    return absl::InvalidArgumentError(
        "--clip_norm needs the whole gradient before the push; --priority pushes each layer as "
        "backward produces it: drop one of them");
  }
  if (SparseRowDim(model_) > 0 && !CarriesRows(schedule)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", model_.name(), " pulls and pushes sparse rows with each whole step, which the ",
        ScheduleName(schedule), " schedule cuts into layers: drop --priority"));
  }
  return schedule;
}

absl::Status Trainer::AnnounceStart(const ClusterInfo& cluster, const BatchPlan& plan,
                                    int64_t total_steps, Schedule schedule) {
  spdlog::info(
      "rank {}/{} {} mode={} staleness={} shards={} params={} global_batch={} "
      "steps/epoch={} resume_step={} schedule={}",
      options_.rank, cluster.num_workers, model_.name(), ConsistencyModeName(cluster.mode),
      cluster.staleness, cluster.num_shards, model_.layout().total(), plan.global_batch(),
      plan.steps_per_epoch(), cluster.resume_clock, ScheduleName(schedule));
  if (metrics_ == nullptr) return absl::OkStatus();
  JsonObject line;
  line.Add("kind", "start")
      .Add("rank", options_.rank)
      .Add("resume_step", cluster.resume_clock)
      .Add("total_steps", total_steps)
      .Add("schedule", ScheduleName(schedule));
  return metrics_->Write(line);
}

DelayOptions Trainer::SeededDelays() const {
  DelayOptions delays = options_.delays;
  delays.seed = options_.seed;
  delays.rank = options_.rank;
  return delays;
}

absl::Status Trainer::Run(const std::atomic<bool>& stop) {
  RETURN_IF_ERROR(ValidateTrainerOptions(options_));
  ASSIGN_OR_RETURN(ClusterInfo cluster, Register());
  ASSIGN_OR_RETURN(std::unique_ptr<StepGradient> gradient,
                   StepGradient::Create(model_, device_, train_, PlanOptions(cluster.num_workers),
                                        options_.overlap_copies));
  gradient->set_clip_norm(options_.clip_norm);
  const BatchPlan& plan = gradient->plan();
  const int64_t total_steps =
      options_.steps > 0 ? options_.steps : plan.steps_per_epoch() * options_.epochs;
  DeclareWork(cluster, total_steps);
  ASSIGN_OR_RETURN(const Schedule schedule, PickSchedule(cluster));
  const int64_t n = model_.layout().total();
  ASSIGN_OR_RETURN(const StepBuffers buffers,
                   StepBuffers::Create(client_, device_, n, NeedsSecondWeights(schedule),
                                       NeedsSecondGradient(schedule), options_.rank));
  if (!cluster.initialized) {
    model_.InitParams(options_.seed, buffers.weights().data());
    RETURN_IF_ERROR(AsJoinError(client_.Init(buffers.weights())));
  }
  HeartbeatThread heartbeat(client_, cluster.lease);
  RETURN_IF_ERROR(AnnounceStart(cluster, plan, total_steps, schedule));
  ASSIGN_OR_RETURN(StepAccountingOptions accounting_options,
                   AccountingOptions(cluster, plan.steps_per_epoch()));
  StepAccounting accounting(std::move(accounting_options), metrics_, stats_, live_);
  DelayInjector delays(SeededDelays());
  const std::unique_ptr<StepSchedule> steps = MakeStepSchedule(
      schedule, StepEnvironment{client_, *gradient, delays, accounting, buffers, total_steps,
                                options_.batch_size * options_.accumulate,
                                MergeParts(model_.LayerParamRanges(), options_.priority_min_part),
                                SparseRowDim(model_)});

  // One step at a time; after the last (or at the time budget) what is in flight is flushed. An
  // ABORTED answer anywhere makes the worker register again and go on at the shards' clock.
  int64_t step = cluster.resume_clock;
  for (;;) {
    bool more = step < total_steps;
    if (more && absl::Now() - accounting.start() >= options_.max_duration) {
      spdlog::info("rank {} reached its time budget at step {}", options_.rank, step);
      more = false;
    }
    if (more && stop.load()) return absl::CancelledError("stopped by signal");
    const absl::Status s = more ? steps->Step(step) : steps->Flush();
    if (s.ok()) {
      if (!more) break;
      ++step;
      continue;
    }
    if (!absl::IsAborted(s)) {
      // A final error (a refused push, a deadline, a shard gone for good): what is still in
      // flight would be thrown away, and a prefetch may wait for this very worker's push that
      // failed, until its deadline. End it now instead of waiting.
      client_.Cancel();
      steps->Drain();
      return s;
    }
    steps->Drain();
    ASSIGN_OR_RETURN(cluster, Rejoin(s, steps->weights()));
    step = cluster.resume_clock;
  }
  if (step < total_steps) {
    // Stopped for good on the time budget, with every push acknowledged: leave the job, so that
    // no BSP round and no SSP pull of the others waits out this worker's lease. Then a prefetch
    // still in flight is answered once the others allow it.
    heartbeat.Stop();
    if (const absl::Status left = client_.Leave(); !left.ok()) {
      spdlog::warn("rank {} could not leave every shard (its lease there runs out instead): {}",
                   options_.rank, left.ToString());
    }
  }
  steps->Drain();  // a prefetch is never started past the last step; this is for the budget
  RETURN_IF_ERROR(accounting.FinishEvaluations());
  spdlog::info("rank {} finished {} of its {} steps in {:.1f}s", options_.rank, step, total_steps,
               absl::ToDoubleSeconds(absl::Now() - accounting.start()));
  return absl::OkStatus();
}

absl::StatusOr<ClusterInfo> Trainer::Rejoin(const absl::Status& why,
                                            absl::Span<const float> params) {
  if (++rejoins_ > options_.max_rejoins) {
    return absl::AbortedError(absl::StrCat("gave up after ", options_.max_rejoins,
                                           " re-registrations; last: ", why.message()));
  }
  spdlog::warn("rank {} registers again: {}", options_.rank, std::string(why.message()));
  ASSIGN_OR_RETURN(ClusterInfo cluster, Register());
  if (!cluster.initialized) {
    // A shard that restarted without a checkpoint has no values: offer the freshest we hold.
    spdlog::warn("rank {}: a shard lost its parameters; offering this worker's copy",
                 options_.rank);
    RETURN_IF_ERROR(AsJoinError(client_.Init(params)));
  }
  stats_.rejoins = rejoins_;
  live_.rejoins.store(rejoins_);
  spdlog::info("rank {} resumes at step {}", options_.rank, cluster.resume_clock);
  if (metrics_ != nullptr) {
    JsonObject line;
    line.Add("kind", "rejoin")
        .Add("rank", options_.rank)
        .Add("resume_step", cluster.resume_clock)
        .Add("reason", std::string(why.message()));
    RETURN_IF_ERROR(metrics_->Write(line));
  }
  return cluster;
}

absl::StatusOr<FreshEvaluation> Trainer::EvaluateFresh(int64_t step, Model& model, Device& device,
                                                       absl::Span<float> params,
                                                       float* params_dev) {
  FreshEvaluation fresh;
  // An observer read: the freshest weights, whatever the consistency mode.
  ASSIGN_OR_RETURN(PullStats read, client_.Pull(step + 1, /*no_wait=*/true, params));
  fresh.read_at = absl::Now();
  fresh.steps_done = live_.step.load() + 1;
  for (int64_t v : read.versions) fresh.updates = std::max(fresh.updates, v);
  RETURN_IF_ERROR(device.CopyToDevice(params.data(), params.size() * sizeof(float), params_dev));
  ASSIGN_OR_RETURN(fresh.test, EvaluateDataset(model, device, params_dev, *test_,
                                               ObserverRows(client_, step + 1)));
  return fresh;
}

}  // namespace ps
