#ifndef PS_WORKER_PYTHON_PYTHON_WORKER_H_
#define PS_WORKER_PYTHON_PYTHON_WORKER_H_

// ps_train._core.Worker: one registered rank over the same GrpcParameterClient the C++ workers
// use. It owns the flat weights and gradient buffers (the shared region's own when there is
// one), which Python sees as numpy arrays without a copy. Every call that may wait on the shards
// runs on calls_ (CallThread), so Ctrl-C interrupts it. The synchronous and overlapped steps are
// in python_worker.cc, the pipelined one in python_worker_pipeline.cc.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <array>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "worker/grpc_parameter_client.h"
#include "worker/heartbeat_thread.h"
#include "worker/python/part_sender.h"
#include "worker/python/py_convert.h"
#include "worker/python/py_support.h"
#include "worker/task_pool.h"

namespace ps {

class Worker {
 public:
  // A step's gradients of one sparse table's rows: (table, distinct keys, keys x dim gradients
  // in key order).
  using RowGradients = std::tuple<int, py::array_t<uint64_t>, py::array_t<float>>;

  // `tensors`: the model's parameters in order, (name, shape) each; their fingerprint is what the
  // shards check, so a worker with another model is refused (FAILED_PRECONDITION).
  // `tables`: the model's sparse tables in order, (name, dim, init_scale) each; the fingerprint
  // covers them too. `buffer_sets`: 2 for PipelinedStep (one set of weights and gradient
  // computes while the other travels), else 1.
  Worker(WorkerConfig config,
         const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors,
         const std::vector<std::tuple<std::string, int64_t, float>>& tables, int buffer_sets);

  ~Worker();

  // Registers with every shard, checks the job's size, takes the buffers and starts the
  // heartbeats. Returns what the shards said about the cluster.
  py::dict Register();

  // Declares the work this rank will do (steps pushes of samples_per_step samples each): beaten to
  // the shards at once when registered, and sent with every later heartbeat.
  void DeclareWork(int64_t steps, int64_t samples_per_step);

  // Offers the weights buffer as the initial values (the first offer wins), then pulls the
  // shards' values for this rank's clock into it.
  py::dict InitAndPull();

  // Pushes the gradient buffer as step `clock()` and pulls step clock()+1 into the weights (one
  // round trip per shard); the clock moves on. A shard that restarted (ABORTED) makes this worker
  // register again and, when the shards resume it at this clock, push the same gradient again.
  //
  // `rows`: the gradients of the step's sparse rows, (table, keys, gradients) each, with distinct
  // keys per table and keys.size() x dim gradients in key order; under BSP only keys that
  // PullRows asked for at this clock.
  py::dict Step(int num_samples, const std::vector<RowGradients>& rows);

  // The current values of table `table`'s rows of `keys` (distinct) into `out` (keys x dim):
  // `for_step`, this worker's lookup for its current step (waiting as the mode says; under BSP
  // these keys may then go with the step's push); else an observer's read.
  void PullRows(int table, const py::array_t<uint64_t>& keys, py::array_t<float>& out,
                bool for_step);

  // Overlap: queues part [begin, end) of the gradient of step clock() for sending now, while the
  // caller computes the rest (the parts of one step are disjoint and cover what is to be pushed).
  void StartPart(int64_t begin, int64_t end, int num_samples);

  // Overlap: waits for the queued parts, then pulls step clock()+1; the clock moves on.
  py::dict FinishParts(int num_samples);

  // Pipeline (SSP with a bound of at least 1, or ASP; made with 2 buffer sets): pushes the
  // gradient set as step clock() and returns while it travels, so the next step computes during
  // the round trip. Each call pushes step c and pulls step c+2 into the weights set step c
  // computed from; the step before waits for that call, then computes on what it brought. A
  // step thus computes on weights that lack the previous step's gradient (one more step of
  // staleness, as ps_worker's pipelined schedule). The first step, and the first after a rejoin,
  // push and pull at once and then prefetch the step after next. Afterwards weights_set() and
  // gradient_set() name the sets the next step computes from and into. Returns the stats of the
  // call this step waited for: the previous step's push, or this one's when it went at once.
  // `rows` as Step's: copied, they travel with the push; the next step's lookups (PullRows) run
  // while they do, so they may lack them (one more update of staleness, as the dense weights).
  py::dict PipelinedStep(int num_samples, const std::vector<RowGradients>& rows);

  // Which buffer set the next step computes from (weights) and into (gradient).
  int weights_set() const { return weights_set_; }
  int gradient_set() const { return gradient_set_; }

  // The shards' reports, as ps_ctl status --json's lines.
  std::vector<std::string> Status();

  // Declares the steps this rank pushed as its work and, when `wait_s` > 0, waits up to that long
  // until no worker can add to the job, pulls the shards' final weights into the weights buffer,
  // and returns the job's work account (what was trained, what skipped). Stops the heartbeats and
  // leaves the job first, so no worker waits for this one's clock once it is here. With `wait_s` >
  // 0 and a `report_path`, also writes the job's report there (job_report.h: staleness, counters,
  // the work account, `require_all_work` as given) as one JSON object.
  py::dict Finish(int64_t samples_per_step, double wait_s, const std::string& report_path,
                  bool require_all_work);

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
  void RefusePipelineUnlessAsync();
  void RequireNothingInFlight() const {
    if (in_flight_.has_value()) {
      throw StatusError{absl::FailedPreconditionError(
          "a pipelined step is in flight: this worker steps with pipelined_step only")};
    }
  }
  int CheckedSet(int set) const;
  void RequireRegistered() const {
    if (!cluster_.has_value()) {
      throw StatusError{absl::FailedPreconditionError("register() first")};
    }
  }
  std::function<void()> Canceller();
  // A call to the shards on calls_, interruptible by Python's signals; its error thrown to Python.
  template <typename T>
  T RunInterruptibly(const std::function<absl::StatusOr<T>()>& call) {
    return ValueOrThrow(calls_.Call<absl::StatusOr<T>>(call, Canceller()));
  }
  void RunStatusInterruptibly(const std::function<absl::Status()>& call);
  absl::Span<float> Weights() { return weights_sets_[weights_set_]; }
  absl::Span<float> Gradient() { return gradient_sets_[gradient_set_]; }

  // Per set, the shared region's buffers when the client has them, else memory of our own.
  void TakeBuffers();

  // A pipelined call: pushes step `push_clock` (-1: none, a prefetch) from the current gradient
  // set, computed from weights of `versions`, and pulls step `pull_clock` into weights set
  // `into`.
  // A step's row gradients, owned: a pipelined push reads them after the step has returned.
  struct OwnedRows {
    std::vector<std::vector<uint64_t>> keys;
    std::vector<std::vector<float>> gradients;
    std::vector<RowsToPush> rows;  // over keys and gradients
  };
  static std::shared_ptr<const OwnedRows> CopyRows(const std::vector<RowsToPush>& rows);
  // Checks `rows` against the tables and views them (valid while `rows` lives).
  std::vector<RowsToPush> ViewRows(const std::vector<RowGradients>& rows) const;

  struct InFlight {
    int64_t push_clock = -1;
    int gradient_set = 0;
    int weights_set = 0;
    int num_samples = 0;
    std::shared_ptr<const OwnedRows> rows;  // pushed with push_clock's gradient
    std::future<absl::StatusOr<PushPullStats>> result;
    PushPullStats stats;  // once settled
  };

  void StartInFlight(int64_t push_clock, std::vector<int64_t> versions, int num_samples,
                     std::shared_ptr<const OwnedRows> rows, int64_t pull_clock, int into);

  // Waits for the pipelined call and makes the weights it brought the current ones. When a shard
  // restarted (ABORTED), registers again and pushes that call's gradient again as the sync step
  // does, and returns nothing: the caller then goes on as after the first step. Other errors are
  // thrown (the call is over either way).
  std::optional<InFlight> Settle();

  // A numpy array over `span` that keeps `owner` (the Python Worker) alive.
  static py::array_t<float> ArrayOver(absl::Span<float> span, py::object owner);

  // Pulls this clock's weights into Weights(); their versions name what the next push computed
  // from.
  py::dict PullNow();

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

  // `call` for step `clock` (this clock) with its gradient, as WithRejoin, but only while the
  // shards resume this rank at `clock`: nullopt once a rejoin moved it (a rollback to an older
  // checkpoint, or rounds closed without this worker). The gradient in hand belongs to `clock`,
  // not to the step the shards expect next, so it is not pushed: the caller computes that step.
  template <typename T>
  std::optional<T> WithRejoinAt(int64_t clock, std::function<absl::StatusOr<T>()> call) {
    for (;;) {
      absl::StatusOr<T> result = calls_.Call<absl::StatusOr<T>>(call, Canceller());
      if (result.ok() || !absl::IsAborted(result.status())) return ValueOrThrow(std::move(result));
      Rejoin(result.status());
      if (clock_ != clock) return std::nullopt;
    }
  }

  // Step `clock` after the shards moved this rank to another clock while it travelled (see
  // WithRejoinAt): pushed when they hold it (they resume at the step after it), otherwise its
  // stats say `pushed` false.
  py::dict Moved(int64_t clock, absl::Time start) const;

  // Registers again after `why` (ABORTED), at most config_.max_rejoins times in a worker's life
  // (then ABORTED is thrown); offers this worker's weights to a shard that lost its own, takes the
  // clock the shards resume this rank at and pulls that clock's weights.
  void Rejoin(const absl::Status& why);

  // A step's end: the pulled versions, the clock after `clock`, and the step's stats.
  py::dict StepDone(int64_t clock, const PushStats& pushed, const PullStats& pulled,
                    absl::Time start);

  // A step's stats for StepStats: `step` is the clock pushed (-1: none, a prefetch).
  py::dict StatsDict(int64_t clock, const PushStats& pushed, const PullStats& pulled,
                     absl::Time start) const;

  py::dict ClusterDict() const;

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

}  // namespace ps

#endif  // PS_WORKER_PYTHON_PYTHON_WORKER_H_
