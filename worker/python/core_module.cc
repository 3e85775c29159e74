// ps_train._core: the worker's side of the cluster for Python training loops. One Worker is one
// registered rank over the same GrpcParameterClient the C++ workers use (retries, leases,
// exactly-once pushes, TLS and token, shared memory with shards on this host). It owns the flat
// weights and gradient buffers (the shared region's own when there is one), which Python sees as
// numpy arrays without a copy, so a pull lands in the model's parameters and a push leaves from
// its gradients with no copy on this side.
//
// Every call that may wait on the shards runs on a helper thread while this thread, without the
// GIL, checks for Python signals every 50 ms: Ctrl-C (or SIGTERM turned into SystemExit by
// ps_train.torch) cancels the calls in flight and raises in Python instead of hanging in a BSP
// barrier. Errors come to Python as ps_train.PsError with the gRPC code and the shard's message.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/param_layout.h"
#include "common/base/status_macros.h"
#include "common/transport/grpc_security.h"
#include "spdlog/spdlog.h"
#include "worker/grpc_parameter_client.h"
#include "worker/heartbeat_thread.h"
#include "worker/shard_report_json.h"
#include "worker/task_pool.h"
#include "worker/work_account.h"

namespace py = pybind11;

namespace ps {
namespace {

// An absl::Status on its way to Python (translated to ps_train.PsError).
struct StatusError {
  absl::Status status;
};

void ThrowIfError(const absl::Status& s) {
  if (!s.ok()) throw StatusError{s};
}
template <typename T>
T ValueOrThrow(absl::StatusOr<T> v) {
  if (!v.ok()) throw StatusError{v.status()};
  return *std::move(v);
}

// Runs calls that may wait on the shards on a thread of its own while the calling thread, without
// the GIL, checks Python's signals every 50 ms: on a signal, `cancel` stops the call, the call is
// waited for and the signal's exception (KeyboardInterrupt, SystemExit, ...) propagates. One
// thread for all calls: starting a thread per call cost about 0.1 ms a step. Calls from several
// Python threads take turns.
class CallThread {
 public:
  CallThread() : thread_([this] { Loop(); }) {}
  ~CallThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  CallThread(const CallThread&) = delete;
  CallThread& operator=(const CallThread&) = delete;

  template <typename R>
  R Call(const std::function<R()>& call, const std::function<void()>& cancel) {
    std::optional<R> result;
    std::unique_lock<std::mutex> turn(turn_, std::defer_lock);
    {
      py::gil_scoped_release unlocked;
      turn.lock();
      std::lock_guard<std::mutex> lock(mu_);
      job_ = [&result, &call] { result.emplace(call()); };
      finished_ = false;
    }
    cv_.notify_all();
    for (;;) {
      {
        py::gil_scoped_release unlocked;
        std::unique_lock<std::mutex> lock(mu_);
        if (cv_.wait_for(lock, std::chrono::milliseconds(50), [this] { return finished_; })) break;
      }
      if (PyErr_CheckSignals() != 0) {
        cancel();
        {
          py::gil_scoped_release unlocked;
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, [this] { return finished_; });
        }
        throw py::error_already_set();
      }
    }
    return *std::move(result);
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return done_ || job_ != nullptr; });
      if (job_ == nullptr) return;  // done
      std::function<void()> job = std::move(job_);
      job_ = nullptr;
      lock.unlock();
      job();
      lock.lock();
      finished_ = true;
      cv_.notify_all();
    }
  }

  std::mutex turn_;  // held by the Python thread whose call is running
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool finished_ = true;
  bool done_ = false;
  std::thread thread_;
};

// What a Python worker is told about the cluster and how to reach it.
struct WorkerConfig {
  std::vector<std::string> servers;
  int rank = 0;
  int num_workers = 0;  // 0: take the shards' word for it
  std::string token_file, tls_ca, tls_cert, tls_key, tls_server_name;
  bool allow_plaintext_token = false;
  bool shared_memory = true;
  double register_timeout_s = 120;
  double call_timeout_s = 30;
  double pull_timeout_s = 600;
  double retry_s = 60;  // 0: retry UNAVAILABLE forever
  int max_rejoins = 10;
};

GrpcClientOptions ClientOptions(const WorkerConfig& c) {
  GrpcClientOptions o;
  o.servers = c.servers;
  o.rank = c.rank;
  o.call_timeout = absl::Seconds(c.call_timeout_s);
  o.pull_timeout = absl::Seconds(c.pull_timeout_s);
  o.retry_for = c.retry_s <= 0 ? absl::InfiniteDuration() : absl::Seconds(c.retry_s);
  SecurityOptions security;
  security.token_file = c.token_file;
  security.tls_ca = c.tls_ca;
  security.tls_cert = c.tls_cert;
  security.tls_key = c.tls_key;
  security.tls_server_name = c.tls_server_name;
  security.allow_plaintext_token = c.allow_plaintext_token;
  o.security = ValueOrThrow(MakeClientSecurity(security));
  o.shared_memory = c.shared_memory;
  return o;
}

void CheckConfig(const WorkerConfig& c) {
  if (c.servers.empty()) {
    throw StatusError{absl::InvalidArgumentError("no servers: pass servers=\"host:port,...\"")};
  }
  if (c.rank < 0 || (c.num_workers > 0 && c.rank >= c.num_workers)) {
    throw StatusError{absl::InvalidArgumentError(
        absl::StrCat("rank ", c.rank, " is not in [0, num_workers ", c.num_workers, ")"))};
  }
}

py::dict PushStatsDict(const PushStats& s) {
  py::dict d;
  d["staleness"] = s.max_staleness;
  d["applied"] = s.applied;
  d["buffered"] = s.buffered;
  d["duplicates"] = s.duplicates;
  d["dropped"] = s.dropped;
  d["late"] = s.late;
  d["push_bytes"] = s.payload_bytes;
  return d;
}

void AddPushStats(const PushStats& part, PushStats* total) {
  total->max_staleness = std::max(total->max_staleness, part.max_staleness);
  total->applied += part.applied;
  total->buffered += part.buffered;
  total->duplicates += part.duplicates;
  total->dropped += part.dropped;
  total->late += part.late;
  total->payload_bytes += part.payload_bytes;
}

py::dict WorkAccountDict(const WorkAccount& work) {
  py::list workers;
  for (const WorkerWork& w : work.workers) {
    py::dict d;
    d["rank"] = w.rank;
    d["state"] = w.state;
    d["planned_steps"] = w.planned_steps;
    d["gradients_expected"] = w.gradients_expected;
    d["gradients_applied"] = w.gradients_applied;
    d["steps_skipped"] = w.steps_skipped;
    d["samples_skipped"] = w.samples_skipped;
    workers.append(d);
  }
  py::dict d;
  d["gradients_expected"] = work.gradients_expected;
  d["gradients_applied"] = work.gradients_applied;
  d["samples_skipped"] = work.samples_skipped;
  d["job_done"] = work.job_done;
  d["workers"] = workers;
  return d;
}

// The shards' reports as JSON objects, one per shard (ps_ctl status --json's lines).
std::vector<std::string> ReportsJson(const std::vector<ShardReport>& reports,
                                     const std::vector<std::string>& servers) {
  std::vector<std::string> out;
  for (size_t i = 0; i < reports.size(); ++i)
    out.push_back(ShardReportJson(reports[i], servers[i]));
  return out;
}

// Sends the parts of a step's gradient in the order they are queued, one PushParts call at a
// time, on its own thread: the overlap of pushes with backward (priority scheduling's order).
class PartSender {
 public:
  using Send = std::function<absl::StatusOr<PushStats>(KeyRange)>;
  explicit PartSender(Send send) : send_(std::move(send)), thread_([this] { Loop(); }) {}
  ~PartSender() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Queue(KeyRange part) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(part);
      ++queued_;
    }
    cv_.notify_all();
  }
  // Waits until every queued part is sent; the step's combined stats, or the first error. Resets
  // for the next step.
  absl::StatusOr<PushStats> Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return sent_ == queued_; });
    absl::StatusOr<PushStats> result =
        error_.ok() ? absl::StatusOr<PushStats>(stats_) : absl::StatusOr<PushStats>(error_);
    error_ = absl::OkStatus();
    stats_ = PushStats();
    return result;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return done_ || !queue_.empty(); });
      if (queue_.empty()) return;  // done
      const KeyRange part = queue_.front();
      queue_.pop_front();
      const bool skip = !error_.ok();  // the step failed already: its other parts do not go
      lock.unlock();
      absl::StatusOr<PushStats> sent = skip ? absl::StatusOr<PushStats>(PushStats()) : send_(part);
      lock.lock();
      if (!sent.ok() && error_.ok()) error_ = sent.status();
      if (sent.ok()) AddPushStats(*sent, &stats_);
      ++sent_;
      cv_.notify_all();
    }
  }

  Send send_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<KeyRange> queue_;
  int64_t queued_ = 0, sent_ = 0;
  bool done_ = false;
  absl::Status error_;
  PushStats stats_;
  std::thread thread_;
};

class Worker {
 public:
  // `tensors`: the model's parameters in order, (name, shape) each; their fingerprint is what the
  // shards check, so a worker with another model is refused (FAILED_PRECONDITION).
  // `tables`: the model's sparse tables in order, (name, dim, init_scale) each; the fingerprint
  // covers them too. `buffer_sets`: 2 for PipelinedStep (one set of weights and gradient
  // computes while the other travels), else 1.
  Worker(WorkerConfig config,
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

  ~Worker() {
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

  // Registers with every shard, checks the job's size, takes the buffers and starts the
  // heartbeats. Returns what the shards said about the cluster.
  py::dict Register() {
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

  // Declares the work this rank will do (steps pushes of samples_per_step samples each); sent with
  // every later heartbeat.
  void DeclareWork(int64_t steps, int64_t samples_per_step) {
    client_->SetWorkPlan(steps, samples_per_step);
  }

  // Offers the weights buffer as the initial values (the first offer wins), then pulls the
  // shards' values for this rank's clock into it.
  py::dict InitAndPull() {
    RequireRegistered();
    if (!cluster_->initialized) {
      RunStatusInterruptibly([this] { return client_->Init(Weights()); });
    }
    return PullNow();
  }

  // Pushes the gradient buffer as step `clock()` and pulls step clock()+1 into the weights (one
  // round trip per shard); the clock moves on. A shard that restarted (ABORTED) makes this worker
  // register again and, when the shards resume it at this clock, push the same gradient again.
  //
  // `rows`: the gradients of the step's sparse rows, (table, keys, gradients) each, with distinct
  // keys per table and keys.size() x dim gradients in key order; under BSP only keys that
  // PullRows asked for at this clock.
  py::dict Step(
      int num_samples,
      const std::vector<std::tuple<int, py::array_t<uint64_t>, py::array_t<float>>>& rows) {
    RequireRegistered();
    RequireNothingInFlight();
    const absl::Time start = absl::Now();
    const int64_t clock = clock_;
    std::vector<RowsToPush> push_rows;
    for (const auto& [table, keys, gradients] : rows) {
      CheckRowsShape(table, keys, gradients);
      push_rows.push_back(RowsToPush{table, absl::MakeConstSpan(keys.data(), keys.size()),
                                     absl::MakeConstSpan(gradients.data(), gradients.size())});
    }
    const PushPullStats stats = WithRejoin<PushPullStats>([this, num_samples, &push_rows] {
      if (push_rows.empty()) {
        return client_->PushPull(clock_, versions_, num_samples, Gradient(), clock_ + 1, Weights());
      }
      return client_->PushPullWithRows(clock_, versions_, num_samples, Gradient(), push_rows,
                                       clock_ + 1, Weights(), {});
    });
    return StepDone(clock, stats.pushed, stats.pulled, start);
  }

  // The current values of table `table`'s rows of `keys` (distinct) into `out` (keys x dim):
  // `for_step`, this worker's lookup for its current step (waiting as the mode says; under BSP
  // these keys may then go with the step's push); else an observer's read.
  void PullRows(int table, const py::array_t<uint64_t>& keys, py::array_t<float>& out,
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

  // Overlap: queues part [begin, end) of the gradient of step clock() for sending now, while the
  // caller computes the rest (the parts of one step are disjoint and cover what is to be pushed).
  void StartPart(int64_t begin, int64_t end, int num_samples) {
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

  // Overlap: waits for the queued parts, then pulls step clock()+1; the clock moves on.
  py::dict FinishParts(int num_samples) {
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
      // Some parts went nowhere: after the rejoin the whole gradient goes as one push.
      Rejoin(parts.status());
      return Step(num_samples, {});
    }
    const PullStats pulled = WithRejoin<PullStats>(
        [this] { return client_->Pull(clock_ + 1, /*no_wait=*/false, Weights()); });
    return StepDone(clock, *parts, pulled, start);
  }

  // Pipeline (SSP with a bound of at least 1, or ASP; made with 2 buffer sets): pushes the
  // gradient set as step clock() and returns while it travels, so the next step computes during
  // the round trip. Each call pushes step c and pulls step c+2 into the weights set step c
  // computed from; the step before waits for that call, then computes on what it brought. A
  // step thus computes on weights that lack the previous step's gradient (one more step of
  // staleness, as ps_worker's pipelined schedule). The first step, and the first after a rejoin,
  // push and pull at once and then prefetch the step after next. Afterwards weights_set() and
  // gradient_set() name the sets the next step computes from and into. Returns the stats of the
  // call this step waited for: the previous step's push, or this one's when it went at once.
  py::dict PipelinedStep(int num_samples) {
    RequireRegistered();
    if (buffer_sets_ != 2) {
      throw StatusError{
          absl::FailedPreconditionError("this worker was made with one buffer set: no pipeline")};
    }
    const absl::Time start = absl::Now();
    if (in_flight_.has_value()) {
      // The push names the versions this step computed from, not those the settled call brings.
      const std::vector<int64_t> computed_from = versions_;
      std::optional<InFlight> settled = Settle();
      if (settled.has_value()) {
        const int64_t clock = clock_;
        StartInFlight(clock, computed_from, num_samples, clock + 2, 1 - weights_set_);
        gradient_set_ = 1 - gradient_set_;  // the next step computes while this one travels
        clock_ = clock + 1;
        return StatsDict(settled->push_clock, settled->stats.pushed, settled->stats.pulled, start);
      }
    }
    // Nothing in flight (the first step, or a rejoin): push and pull now, then prefetch the weights
    // of the step after next into the set this step computed from.
    const int next = 1 - weights_set_;
    const int64_t clock = clock_;
    const PushPullStats stats = WithRejoin<PushPullStats>([this, num_samples, next] {
      return client_->PushPull(clock_, versions_, num_samples, Gradient(), clock_ + 1,
                               weights_sets_[next]);
    });
    weights_set_ = next;
    py::dict d = StepDone(clock, stats.pushed, stats.pulled, start);
    StartInFlight(/*push_clock=*/-1, {}, num_samples, clock_ + 1, 1 - weights_set_);
    return d;
  }

  // Which buffer set the next step computes from (weights) and into (gradient).
  int weights_set() const { return weights_set_; }
  int gradient_set() const { return gradient_set_; }

  std::vector<std::string> Status() {
    const std::vector<ShardReport> reports =
        RunInterruptibly<std::vector<ShardReport>>([this] { return client_->Status(); });
    return ReportsJson(reports, config_.servers);
  }

  // Declares the steps this rank pushed as its work and, when `wait_s` > 0, waits up to that long
  // until no worker can add to the job, pulls the shards' final weights into the weights buffer,
  // and returns the job's work account (what was trained, what skipped). Stops the heartbeats.
  py::dict Finish(int64_t samples_per_step, double wait_s) {
    RequireRegistered();
    // A pipelined push still travelling is part of the work: it lands first, and the weights it
    // brought become the current ones.
    if (in_flight_.has_value()) Settle();
    client_->SetWorkPlan(clock_, samples_per_step);
    RunStatusInterruptibly([this] { return client_->Heartbeat(); });
    const absl::Time deadline = absl::Now() + absl::Seconds(wait_s);
    WorkAccount work;
    for (;;) {
      const std::vector<ShardReport> reports =
          RunInterruptibly<std::vector<ShardReport>>([this] { return client_->Status(); });
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
    heartbeat_.reset();
    return WorkAccountDict(work);
  }

  py::array_t<float> WeightsArray(int set, py::object self) {
    return ArrayOver(weights_sets_[CheckedSet(set)], self);
  }
  py::array_t<float> GradientArray(int set, py::object self) {
    return ArrayOver(gradient_sets_[CheckedSet(set)], self);
  }
  int64_t clock() const { return clock_; }
  int64_t size() const { return n_; }
  uint64_t fingerprint() const { return fingerprint_; }
  int shared_memory_shards() const { return client_->shared_memory_shards(); }
  void Cancel() { client_->Cancel(); }

 private:
  template <typename Values>
  void CheckRowsShape(int table, const py::array_t<uint64_t>& keys, const Values& values) const {
    if (table < 0 || table >= static_cast<int>(table_dims_.size())) {
      throw StatusError{absl::InvalidArgumentError(absl::StrCat(
          "table ", table, " is not one of the model's ", table_dims_.size(), " tables"))};
    }
    if (keys.ndim() != 1 || values.size() != keys.size() * table_dims_[table]) {
      throw StatusError{absl::InvalidArgumentError(
          absl::StrCat("rows of table ", table, ": ", keys.size(), " keys need ",
                       keys.size() * table_dims_[table], " values, not ", values.size()))};
    }
  }
  // A pipelined step computes on weights one round older than BSP or SSP(0) allow. The shards'
  // mode, read as an observer (with the same wait for them to come up as Register's), so that a
  // refused worker never joins the job.
  void RefusePipelineUnlessAsync() {
    const absl::Time deadline = absl::Now() + absl::Seconds(config_.register_timeout_s);
    absl::StatusOr<std::vector<ShardReport>> reports;
    for (;;) {
      reports = calls_.Call<absl::StatusOr<std::vector<ShardReport>>>(
          [this] { return client_->Status(); }, Canceller());
      if (reports.ok() || !absl::IsUnavailable(reports.status()) || absl::Now() >= deadline) break;
      py::gil_scoped_release unlocked;
      absl::SleepFor(absl::Milliseconds(200));
    }
    for (const ShardReport& r : ValueOrThrow(std::move(reports))) {
      if (r.mode == ConsistencyMode::kBsp ||
          (r.mode == ConsistencyMode::kSsp && r.staleness_bound < 1)) {
        throw StatusError{absl::FailedPreconditionError(absl::StrCat(
            "a pipelined worker computes on weights one step older than a BSP (or SSP bound 0) "
            "step allows; the shards run ",
            ConsistencyModeName(r.mode), " with bound ", r.staleness_bound,
            ": pipeline needs SSP with a bound of at least 1, or ASP"))};
      }
    }
  }
  void RequireNothingInFlight() const {
    if (in_flight_.has_value()) {
      throw StatusError{absl::FailedPreconditionError(
          "a pipelined step is in flight: this worker steps with pipelined_step only")};
    }
  }
  int CheckedSet(int set) const {
    if (set < 0 || set >= buffer_sets_) {
      throw StatusError{absl::InvalidArgumentError(
          absl::StrCat("buffer set ", set, " is not in [0, ", buffer_sets_, ")"))};
    }
    if (weights_sets_[set].empty())
      throw StatusError{absl::FailedPreconditionError("register() first")};
    return set;
  }
  void RequireRegistered() const {
    if (!cluster_.has_value()) {
      throw StatusError{absl::FailedPreconditionError("register() first")};
    }
  }
  std::function<void()> Canceller() {
    return [this] { client_->Cancel(); };
  }
  // A call to the shards on calls_, interruptible by Python's signals; its error thrown to Python.
  template <typename T>
  T RunInterruptibly(const std::function<absl::StatusOr<T>()>& call) {
    return ValueOrThrow(calls_.Call<absl::StatusOr<T>>(call, Canceller()));
  }
  void RunStatusInterruptibly(const std::function<absl::Status()>& call) {
    ThrowIfError(calls_.Call<absl::Status>(call, Canceller()));
  }
  absl::Span<float> Weights() { return weights_sets_[weights_set_]; }
  absl::Span<float> Gradient() { return gradient_sets_[gradient_set_]; }

  // Per set, the shared region's buffers when the client has them, else memory of our own.
  void TakeBuffers() {
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

  // A pipelined call: pushes step `push_clock` (-1: none, a prefetch) from the current gradient
  // set, computed from weights of `versions`, and pulls step `pull_clock` into weights set
  // `into`.
  struct InFlight {
    int64_t push_clock = -1;
    int gradient_set = 0;
    int weights_set = 0;
    int num_samples = 0;
    std::future<absl::StatusOr<PushPullStats>> result;
    PushPullStats stats;  // once settled
  };

  void StartInFlight(int64_t push_clock, std::vector<int64_t> versions, int num_samples,
                     int64_t pull_clock, int into) {
    if (pipeline_ == nullptr) pipeline_ = std::make_unique<TaskPool>(1);
    InFlight f;
    f.push_clock = push_clock;
    f.gradient_set = gradient_set_;
    f.weights_set = into;
    f.num_samples = num_samples;
    f.result = pipeline_->Submit([client = client_.get(), push_clock, num_samples, pull_clock,
                                  versions = std::move(versions), gradient = Gradient(),
                                  weights =
                                      weights_sets_[into]]() -> absl::StatusOr<PushPullStats> {
      if (push_clock >= 0) {
        return client->PushPull(push_clock, versions, num_samples, gradient, pull_clock, weights);
      }
      PushPullStats prefetched;
      ASSIGN_OR_RETURN(prefetched.pulled, client->Pull(pull_clock, /*no_wait=*/false, weights));
      return prefetched;
    });
    in_flight_ = std::move(f);
  }

  // Waits for the pipelined call and makes the weights it brought the current ones. When a shard
  // restarted (ABORTED), registers again and pushes that call's gradient again as the sync step
  // does, and returns nothing: the caller then goes on as after the first step. Other errors are
  // thrown (the call is over either way).
  std::optional<InFlight> Settle() {
    InFlight f = std::move(*in_flight_);
    in_flight_.reset();
    absl::StatusOr<PushPullStats> r =
        calls_.Call<absl::StatusOr<PushPullStats>>([&f] { return f.result.get(); }, Canceller());
    if (r.ok()) {
      f.stats = *std::move(r);
      weights_set_ = f.weights_set;
      versions_ = f.stats.pulled.versions;
      return f;
    }
    if (!absl::IsAborted(r.status())) throw StatusError{r.status()};
    if (f.push_clock >= 0) clock_ = f.push_clock;  // that push may not have landed
    Rejoin(r.status());  // the shards' clock for this rank, and its weights into Weights()
    if (f.push_clock >= 0) {
      const PushPullStats again = WithRejoin<PushPullStats>([this, &f] {
        return client_->PushPull(clock_, versions_, f.num_samples, gradient_sets_[f.gradient_set],
                                 clock_ + 1, Weights());
      });
      versions_ = again.pulled.versions;
      ++clock_;
    }
    return std::nullopt;
  }

  // A numpy array over `span` that keeps `owner` (the Python Worker) alive.
  static py::array_t<float> ArrayOver(absl::Span<float> span, py::object owner) {
    return py::array_t<float>({static_cast<py::ssize_t>(span.size())}, {sizeof(float)}, span.data(),
                              owner);
  }

  py::dict PullNow() {
    const absl::Time start = absl::Now();
    const PullStats pulled = WithRejoin<PullStats>(
        [this] { return client_->Pull(clock_, /*no_wait=*/false, Weights()); });
    versions_ = pulled.versions;
    py::dict d;
    d["step"] = clock_;
    d["pull_ms"] = absl::ToDoubleMilliseconds(absl::Now() - start);
    return d;
  }

  // `call` for this clock; on ABORTED (a shard restarted, or this worker's lease ran out while it
  // was away) registers again and calls again. The shards resume this rank at the clock they
  // hold: normally this one, so the same gradient goes again and nothing is lost; an older one
  // when a shard restored an older checkpoint, and then the steps in between are gone from the
  // shards, which a warning says and the step's result counts (`rolled_back`).
  template <typename T>
  T WithRejoin(std::function<absl::StatusOr<T>()> call) {
    for (;;) {
      absl::StatusOr<T> result = calls_.Call<absl::StatusOr<T>>(call, Canceller());
      if (result.ok() || !absl::IsAborted(result.status())) return ValueOrThrow(std::move(result));
      Rejoin(result.status());
    }
  }

  void Rejoin(const absl::Status& why) {
    if (++rejoins_ > config_.max_rejoins) {
      throw StatusError{absl::AbortedError(absl::StrCat(
          "gave up after ", config_.max_rejoins, " re-registrations; last: ", why.message()))};
    }
    spdlog::warn("rank {} registers again: {}", config_.rank, std::string(why.message()));
    cluster_ = RunInterruptibly<ClusterInfo>([this] {
      return client_->Register(config_.rank, absl::Seconds(config_.register_timeout_s));
    });
    if (!cluster_->initialized) {
      spdlog::warn("rank {}: a shard lost its parameters; offering this worker's copy",
                   config_.rank);
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

  py::dict StepDone(int64_t clock, const PushStats& pushed, const PullStats& pulled,
                    absl::Time start) {
    versions_ = pulled.versions;
    clock_ = clock + 1;
    return StatsDict(clock, pushed, pulled, start);
  }

  // A step's stats for StepStats: `step` is the clock pushed (-1: none, a prefetch).
  py::dict StatsDict(int64_t clock, const PushStats& pushed, const PullStats& pulled,
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

  py::dict ClusterDict() const {
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

  WorkerConfig config_;
  int64_t n_ = 0;
  uint64_t fingerprint_ = 0;
  std::unique_ptr<GrpcParameterClient> client_;
  std::optional<ClusterInfo> cluster_;
  int64_t clock_ = 0;
  std::vector<int64_t> versions_;  // of the current weights set's values, per shard
  const int buffer_sets_;
  std::array<absl::Span<float>, 2> weights_sets_, gradient_sets_;
  std::array<std::vector<float>, 2> own_weights_, own_gradient_;
  int weights_set_ = 0, gradient_set_ = 0;  // the sets the next step computes from and into
  std::optional<InFlight> in_flight_;       // the pipelined call travelling, if any
  std::unique_ptr<TaskPool> pipeline_;
  std::vector<int64_t> table_dims_;  // of the model's sparse tables, in order
  std::unique_ptr<HeartbeatThread> heartbeat_;
  std::unique_ptr<PartSender> sender_;
  CallThread calls_;
  int rejoins_ = 0;
  int64_t rolled_back_ = 0;  // steps of this rank the shards lost when they resumed it earlier
};

}  // namespace
}  // namespace ps

PYBIND11_MODULE(_core, m) {
  m.doc() = "The C++ side of ps_train: a worker rank's client of the parameter-server shards.";

  // ps_train.errors.PsError(code, code_name, message): raised for every error of the shards or the
  // transport, with the gRPC status code.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ps::StatusError& e) {
      py::object error_class = py::module_::import("ps_train.errors").attr("PsError");
      const int code = static_cast<int>(e.status.code());
      py::object error = error_class(code, absl::StatusCodeToString(e.status.code()),
                                     std::string(e.status.message()));
      PyErr_SetObject(error_class.ptr(), error.ptr());
    }
  });

  py::class_<ps::WorkerConfig>(m, "WorkerConfig")
      .def(py::init<>())
      .def_readwrite("servers", &ps::WorkerConfig::servers)
      .def_readwrite("rank", &ps::WorkerConfig::rank)
      .def_readwrite("num_workers", &ps::WorkerConfig::num_workers)
      .def_readwrite("token_file", &ps::WorkerConfig::token_file)
      .def_readwrite("tls_ca", &ps::WorkerConfig::tls_ca)
      .def_readwrite("tls_cert", &ps::WorkerConfig::tls_cert)
      .def_readwrite("tls_key", &ps::WorkerConfig::tls_key)
      .def_readwrite("tls_server_name", &ps::WorkerConfig::tls_server_name)
      .def_readwrite("allow_plaintext_token", &ps::WorkerConfig::allow_plaintext_token)
      .def_readwrite("shared_memory", &ps::WorkerConfig::shared_memory)
      .def_readwrite("register_timeout_s", &ps::WorkerConfig::register_timeout_s)
      .def_readwrite("call_timeout_s", &ps::WorkerConfig::call_timeout_s)
      .def_readwrite("pull_timeout_s", &ps::WorkerConfig::pull_timeout_s)
      .def_readwrite("retry_s", &ps::WorkerConfig::retry_s)
      .def_readwrite("max_rejoins", &ps::WorkerConfig::max_rejoins);

  py::class_<ps::Worker>(m, "Worker")
      .def(py::init<ps::WorkerConfig,
                    const std::vector<std::pair<std::string, std::vector<int64_t>>>&,
                    const std::vector<std::tuple<std::string, int64_t, float>>&, int>(),
           py::arg("config"), py::arg("tensors"), py::arg("tables"), py::arg("buffer_sets") = 1)
      .def("register", &ps::Worker::Register)
      .def("declare_work", &ps::Worker::DeclareWork, py::arg("steps"), py::arg("samples_per_step"))
      .def("init_and_pull", &ps::Worker::InitAndPull)
      .def("step", &ps::Worker::Step, py::arg("num_samples"), py::arg("rows"))
      .def("pull_rows", &ps::Worker::PullRows, py::arg("table"), py::arg("keys"), py::arg("out"),
           py::arg("for_step"))
      .def("start_part", &ps::Worker::StartPart, py::arg("begin"), py::arg("end"),
           py::arg("num_samples"))
      .def("finish_parts", &ps::Worker::FinishParts, py::arg("num_samples"))
      .def("pipelined_step", &ps::Worker::PipelinedStep, py::arg("num_samples"))
      .def("status", &ps::Worker::Status)
      .def("finish", &ps::Worker::Finish, py::arg("samples_per_step"), py::arg("wait_s"))
      .def("cancel", &ps::Worker::Cancel)
      .def(
          "weights_array",
          [](py::object self, int set) { return self.cast<ps::Worker&>().WeightsArray(set, self); },
          py::arg("set"))
      .def(
          "gradient_array",
          [](py::object self, int set) {
            return self.cast<ps::Worker&>().GradientArray(set, self);
          },
          py::arg("set"))
      .def_property_readonly("weights_set", &ps::Worker::weights_set)
      .def_property_readonly("gradient_set", &ps::Worker::gradient_set)
      .def_property_readonly("clock", &ps::Worker::clock)
      .def_property_readonly("size", &ps::Worker::size)
      .def_property_readonly("fingerprint", &ps::Worker::fingerprint)
      .def_property_readonly("shared_memory_shards", &ps::Worker::shared_memory_shards);

  // The shards' reports (ps_ctl status --json's lines), read as an observer: no rank, no model.
  m.def(
      "shard_status",
      [](const ps::WorkerConfig& config) {
        if (config.servers.empty()) {
          throw ps::StatusError{absl::InvalidArgumentError("no servers")};
        }
        ps::GrpcClientOptions options = ps::ClientOptions(config);
        options.shared_memory = false;
        std::unique_ptr<ps::GrpcParameterClient> client =
            ps::ValueOrThrow(ps::GrpcParameterClient::Create(options));
        ps::GrpcParameterClient* raw = client.get();
        ps::CallThread calls;
        const std::vector<ps::ShardReport> reports =
            ps::ValueOrThrow(calls.Call<absl::StatusOr<std::vector<ps::ShardReport>>>(
                [raw] { return raw->Status(); }, [raw] { raw->Cancel(); }));
        return ps::ReportsJson(reports, config.servers);
      },
      py::arg("config"));
}
