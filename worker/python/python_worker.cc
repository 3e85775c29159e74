#include "worker/python/python_worker.h"

#include <algorithm>
#include <chrono>

#include "common/base/json_lines.h"
#include "common/base/param_layout.h"
#include "common/base/whole_file.h"
#include "spdlog/spdlog.h"
#include "worker/job_report.h"

namespace ps {

Worker::Worker(WorkerConfig config,
               const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors,
               const std::vector<std::tuple<std::string, int64_t, float>>& tables, int buffer_sets)
    : config_(std::move(config)), buffer_sets_(buffer_sets) {
  CheckConfig(config_);
  if (buffer_sets_ != 1 && buffer_sets_ != 2) {
    throw StatusError{
        absl::InvalidArgumentError(absl::StrCat("buffer_sets is 1 or 2, not ", buffer_sets_))};
  }
  std::vector<TensorSpec> specs;
  for (const auto& [name, shape] : tensors) specs.push_back(TensorSpec{name, shape});
  std::vector<SparseTableSpec> sparse;
  for (const auto& [name, dim, init_scale] : tables) {
    sparse.push_back(SparseTableSpec{name, dim, init_scale});
  }
  ParamLayout layout = ValueOrThrow(ParamLayout::Create(std::move(specs)));
  const ParamDescription description =
      ValueOrThrow(ParamDescription::Create(std::move(layout), sparse));
  GrpcClientOptions options = ClientOptions(config_);
  options.fingerprint = description.fingerprint();
  options.total_params = description.dense().total();
  options.tables = sparse;
  options.shared_memory_slots = buffer_sets_;
  for (const SparseTableSpec& t : sparse) table_dims_.push_back(t.dim);
  n_ = options.total_params;
  fingerprint_ = options.fingerprint;
  client_ = ValueOrThrow(GrpcParameterClient::Create(options));
}

Worker::~Worker() {
  // A pipelined call still travelling ends before its buffers go: a prefetch at once, a push
  // given the call timeout to land (its pull may wait on workers that are gone; finish()
  // waits for it in full).
  if (in_flight_.has_value()) {
    const bool push = in_flight_->push_clock >= 0;
    if (!push || in_flight_->result.wait_for(std::chrono::duration<double>(
                     config_.call_timeout_s)) != std::future_status::ready) {
      if (push) {
        spdlog::warn("rank {}: the pipelined push of step {} did not end within {} s: cancelled",
                     config_.rank, in_flight_->push_clock, config_.call_timeout_s);
      }
      client_->Cancel();
      in_flight_->result.wait();
    }
  }
  // The pipeline, the sender and the heartbeats use the client: they go first.
  pipeline_.reset();
  sender_.reset();
  heartbeat_.reset();
}

py::dict Worker::Register() {
  if (buffer_sets_ == 2) RefusePipelineUnlessAsync();
  const ClusterInfo cluster = RunInterruptibly<ClusterInfo>([this] {
    return client_->Register(config_.rank, absl::Seconds(config_.register_timeout_s));
  });
  if (config_.num_workers > 0 && cluster.num_workers != config_.num_workers) {
    throw StatusError{absl::FailedPreconditionError(
        absl::StrCat("the shards run a job of ", cluster.num_workers,
                     " workers, this worker was told ", config_.num_workers))};
  }
  cluster_ = cluster;
  clock_ = cluster.resume_clock;
  if (weights_sets_[0].empty()) TakeBuffers();
  heartbeat_ = std::make_unique<HeartbeatThread>(*client_, cluster.lease);
  return ClusterDict();
}

void Worker::DeclareWork(int64_t steps, int64_t samples_per_step) {
  client_->SetWorkPlan(steps, samples_per_step);
  // On the shards now, not at the next beat (a third of a lease away): the work account must
  // not judge this rank by the others' plans meanwhile, and a cosine schedule ends by it.
  if (heartbeat_ != nullptr) RunStatusInterruptibly([this] { return client_->Heartbeat(); });
}

py::dict Worker::InitAndPull() {
  RequireRegistered();
  if (!cluster_->initialized) {
    RunStatusInterruptibly([this] { return client_->Init(Weights()); });
  }
  return PullNow();
}

std::vector<RowsToPush> Worker::ViewRows(const std::vector<RowGradients>& rows) const {
  std::vector<RowsToPush> views;
  for (const auto& [table, keys, gradients] : rows) {
    CheckRowsShape(table, keys, gradients);
    views.push_back(RowsToPush{table, absl::MakeConstSpan(keys.data(), keys.size()),
                               absl::MakeConstSpan(gradients.data(), gradients.size())});
  }
  return views;
}

py::dict Worker::Step(int num_samples, const std::vector<RowGradients>& rows) {
  RequireRegistered();
  RequireNothingInFlight();
  const absl::Time start = absl::Now();
  const int64_t clock = clock_;
  const std::vector<RowsToPush> push_rows = ViewRows(rows);
  const std::optional<PushPullStats> stats =
      WithRejoinAt<PushPullStats>(clock, [this, clock, num_samples, &push_rows] {
        return client_->PushPullWithRows(clock, versions_, num_samples, Gradient(), push_rows,
                                         clock + 1, Weights(), {});
      });
  if (!stats.has_value()) return Moved(clock, start);
  return StepDone(clock, stats->pushed, stats->pulled, start);
}

py::dict Worker::Moved(int64_t clock, absl::Time start) const {
  const bool held = clock_ == clock + 1;
  py::dict d = StatsDict(held ? clock : -1, PushStats{}, PullStats{}, start);
  d["pushed"] = held;
  return d;
}

void Worker::PullRows(int table, const py::array_t<uint64_t>& keys, py::array_t<float>& out,
                      bool for_step) {
  RequireRegistered();
  CheckRowsShape(table, keys, out);
  const RowsToPull rows{table, absl::MakeConstSpan(keys.data(), keys.size()),
                        absl::MakeSpan(out.mutable_data(), out.size())};
  RunStatusInterruptibly([this, &rows, for_step] {
    return for_step ? client_->PullStepRows(clock_, {&rows, 1})
                    : client_->PullRows(clock_, {&rows, 1});
  });
}

void Worker::StartPart(int64_t begin, int64_t end, int num_samples) {
  RequireRegistered();
  RequireNothingInFlight();
  if (begin < 0 || end > n_ || begin >= end) {
    throw StatusError{absl::InvalidArgumentError(
        absl::StrCat("part [", begin, ", ", end, ") is not inside [0, ", n_, ")"))};
  }
  if (sender_ == nullptr) {
    sender_ = std::make_unique<PartSender>([this, num_samples](KeyRange part) {
      return client_->PushParts(clock_, versions_, num_samples, Gradient(), {part});
    });
  }
  sender_->Queue(KeyRange{begin, end});
}

py::dict Worker::FinishParts(int num_samples) {
  RequireRegistered();
  const absl::Time start = absl::Now();
  const int64_t clock = clock_;
  if (sender_ == nullptr) {
    throw StatusError{absl::FailedPreconditionError("no part of this step was started")};
  }
  absl::StatusOr<PushStats> parts =
      calls_.Call<absl::StatusOr<PushStats>>([this] { return sender_->Wait(); }, Canceller());
  if (!parts.ok() && !absl::IsAborted(parts.status())) throw StatusError{parts.status()};
  if (!parts.ok()) {
    // Some parts went nowhere: after the rejoin the whole gradient goes as one push, if the
    // shards still expect this step.
    Rejoin(parts.status());
    return clock_ == clock ? Step(num_samples, {}) : Moved(clock, start);
  }
  // The step is pushed; a rejoin while its successor's weights come may still move this rank.
  const std::optional<PullStats> pulled = WithRejoinAt<PullStats>(
      clock, [this, clock] { return client_->Pull(clock + 1, /*no_wait=*/false, Weights()); });
  if (!pulled.has_value()) return Moved(clock, start);
  return StepDone(clock, *parts, *pulled, start);
}

std::vector<std::string> Worker::Status() {
  const std::vector<ShardReport> reports =
      RunInterruptibly<std::vector<ShardReport>>([this] { return client_->Status(); });
  return ReportsJson(reports, config_.servers);
}

py::dict Worker::Finish(int64_t samples_per_step, double wait_s, const std::string& report_path,
                        bool require_all_work) {
  RequireRegistered();
  // A pipelined push still travelling is part of the work: it lands first, and the weights it
  // brought become the current ones.
  if (in_flight_.has_value()) Settle();
  client_->SetWorkPlan(clock_, samples_per_step);
  heartbeat_.reset();
  RunStatusInterruptibly([this] { return client_->Heartbeat(); });
  // With its plan on the shards, this worker leaves the job: the others stop waiting for its
  // clock (a BSP round, an SSP bound) at once, instead of while it waits for them below or, once
  // it has exited, until its lease runs out. What follows needs no lease: the shards' reports and
  // an observer's pull. A failed leave only costs the others that lease.
  if (const absl::Status left = client_->Leave(); !left.ok()) {
    spdlog::warn("rank {}: leaving the job failed ({}); the others wait for its lease",
                 config_.rank, left.ToString());
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(wait_s);
  WorkAccount work;
  std::vector<ShardReport> reports;
  for (;;) {
    reports = RunInterruptibly<std::vector<ShardReport>>([this] { return client_->Status(); });
    work = AccountWork(reports);
    if (work.job_done || absl::Now() >= deadline) break;
    {
      py::gil_scoped_release unlocked;
      absl::SleepFor(absl::Milliseconds(200));
    }
    // Ctrl-C while waiting for the others (the calls above are too short to see it).
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
  if (wait_s > 0 && work.job_done) {
    // The job's final weights into the parameters, for the caller's evaluation.
    RunInterruptibly<PullStats>(
        [this] { return client_->Pull(clock_, /*no_wait=*/true, Weights()); });
  }
  if (!report_path.empty() && wait_s > 0) {
    JsonObject report;
    report.Add("job_done", work.job_done);
    AddJobReport(reports, work, require_all_work, &report);
    ThrowIfError(WriteWholeFile(report_path, report.str() + "\n"));
  }
  return WorkAccountDict(work);
}

int Worker::CheckedSet(int set) const {
  if (set < 0 || set >= buffer_sets_) {
    throw StatusError{absl::InvalidArgumentError(
        absl::StrCat("buffer set ", set, " is not in [0, ", buffer_sets_, ")"))};
  }
  if (weights_sets_[set].empty())
    throw StatusError{absl::FailedPreconditionError("register() first")};
  return set;
}

std::function<void()> Worker::Canceller() {
  return [this] { client_->Cancel(); };
}

void Worker::RunStatusInterruptibly(const std::function<absl::Status()>& call) {
  ThrowIfError(calls_.Call<absl::Status>(call, Canceller()));
}

void Worker::TakeBuffers() {
  for (int set = 0; set < buffer_sets_; ++set) {
    const TransportBuffers t = client_->TakeTransportBuffers(set);
    if (static_cast<int64_t>(t.weights.size()) == n_ &&
        static_cast<int64_t>(t.gradient.size()) == n_) {
      weights_sets_[set] = t.weights;
      gradient_sets_[set] = t.gradient;
      continue;
    }
    own_weights_[set].assign(n_, 0.0f);
    own_gradient_[set].assign(n_, 0.0f);
    weights_sets_[set] = absl::MakeSpan(own_weights_[set]);
    gradient_sets_[set] = absl::MakeSpan(own_gradient_[set]);
  }
}

py::array_t<float> Worker::ArrayOver(absl::Span<float> span, py::object owner) {
  return py::array_t<float>({static_cast<py::ssize_t>(span.size())}, {sizeof(float)}, span.data(),
                            owner);
}

py::dict Worker::PullNow() {
  const absl::Time start = absl::Now();
  const PullStats pulled =
      WithRejoin<PullStats>([this] { return client_->Pull(clock_, /*no_wait=*/false, Weights()); });
  versions_ = pulled.versions;
  py::dict d;
  d["step"] = clock_;
  d["pull_ms"] = absl::ToDoubleMilliseconds(absl::Now() - start);
  return d;
}

void Worker::Rejoin(const absl::Status& why) {
  if (++rejoins_ > config_.max_rejoins) {
    throw StatusError{absl::AbortedError(absl::StrCat("gave up after ", config_.max_rejoins,
                                                      " re-registrations; last: ", why.message()))};
  }
  spdlog::warn("rank {} registers again: {}", config_.rank, std::string(why.message()));
  cluster_ = RunInterruptibly<ClusterInfo>([this] {
    return client_->Register(config_.rank, absl::Seconds(config_.register_timeout_s));
  });
  if (!cluster_->initialized) {
    spdlog::warn("rank {}: a shard lost its parameters; offering this worker's copy", config_.rank);
    RunStatusInterruptibly([this] { return client_->Init(Weights()); });
  }
  if (cluster_->resume_clock != clock_) {
    spdlog::warn(
        "rank {}: the shards resume it at step {}, not {}: steps {}..{} are not in "
        "their weights",
        config_.rank, cluster_->resume_clock, clock_, cluster_->resume_clock, clock_ - 1);
    rolled_back_ += std::max<int64_t>(0, clock_ - cluster_->resume_clock);
    clock_ = cluster_->resume_clock;
  }
  // The versions of the shards' weights at this clock, for the next push's staleness.
  const PullStats pulled = RunInterruptibly<PullStats>(
      [this] { return client_->Pull(clock_, /*no_wait=*/false, Weights()); });
  versions_ = pulled.versions;
}

py::dict Worker::StepDone(int64_t clock, const PushStats& pushed, const PullStats& pulled,
                          absl::Time start) {
  versions_ = pulled.versions;
  clock_ = clock + 1;
  return StatsDict(clock, pushed, pulled, start);
}

py::dict Worker::StatsDict(int64_t clock, const PushStats& pushed, const PullStats& pulled,
                           absl::Time start) const {
  py::dict d = PushStatsDict(pushed);
  d["step"] = clock;
  d["server_wait_ms"] = absl::ToDoubleMilliseconds(pulled.server_wait);
  d["pull_bytes"] = pulled.payload_bytes;
  d["round_trip_ms"] = absl::ToDoubleMilliseconds(absl::Now() - start);
  d["rejoins"] = rejoins_;
  d["rolled_back"] = rolled_back_;
  return d;
}

py::dict Worker::ClusterDict() const {
  py::dict d;
  d["num_shards"] = cluster_->num_shards;
  d["num_workers"] = cluster_->num_workers;
  d["mode"] = ConsistencyModeName(cluster_->mode);
  d["staleness"] = cluster_->staleness;
  d["resume_step"] = cluster_->resume_clock;
  d["initialized"] = cluster_->initialized;
  d["job_finished"] = cluster_->job_finished;
  d["lease_s"] = absl::ToDoubleSeconds(cluster_->lease);
  d["shared_memory_shards"] = client_->shared_memory_shards();
  return d;
}

}  // namespace ps
