#include "worker/step_schedule.h"

#include <future>
#include <optional>
#include <utility>

#include "common/base/enum_names.h"
#include "common/base/status_macros.h"
#include "worker/task_pool.h"

namespace ps {

namespace {

constexpr EnumName<Schedule> kScheduleNames[] = {
    {Schedule::kSequential, "sequential"},
    {Schedule::kPushPull, "push-pull"},
    {Schedule::kOverlap, "overlap"},
    {Schedule::kAsyncPush, "async-push"},
    {Schedule::kOverlapAsyncPush, "overlap+async-push"},
    {Schedule::kPipelined, "pipelined"},
    {Schedule::kPriority, "priority"}};

}  // namespace

std::string ScheduleName(Schedule schedule) { return NameIn(kScheduleNames, schedule); }

Schedule ChooseSchedule(const ScheduleRequest& request, ConsistencyMode mode, int staleness) {
  if (request.priority) return Schedule::kPriority;
  const bool overlap = request.overlap && mode != ConsistencyMode::kBsp;
  const bool async_push = request.async_push && mode != ConsistencyMode::kBsp;
  if (overlap && async_push) {
    const bool can_pipeline = !(mode == ConsistencyMode::kSsp && staleness < 1);
    return request.push_pull && can_pipeline ? Schedule::kPipelined : Schedule::kOverlapAsyncPush;
  }
  if (overlap) return Schedule::kOverlap;
  if (async_push) return Schedule::kAsyncPush;
  return request.push_pull ? Schedule::kPushPull : Schedule::kSequential;
}

bool CarriesRows(Schedule schedule) {
  return schedule == Schedule::kSequential || schedule == Schedule::kPushPull;
}

bool NeedsSecondWeights(Schedule schedule) {
  return schedule == Schedule::kOverlap || schedule == Schedule::kOverlapAsyncPush ||
         schedule == Schedule::kPipelined;
}

bool NeedsSecondGradient(Schedule schedule) {
  return schedule == Schedule::kAsyncPush || schedule == Schedule::kOverlapAsyncPush ||
         schedule == Schedule::kPipelined;
}

namespace {

// The times of a step's compute, as CompletedStep names them.
struct Computed {
  BatchStats batch;
  absl::Time computing, computed, pushing;
};

// Computes step `step`'s gradient of `weights` into `gradient`, then sleeps the injected delay:
// it stands for slower computation, so it comes before the push, and the gradient arrives late
// and staler, as a slow worker's would.
// With a sparse table, `rows` are the step's and `row_grads` receive their gradients.
absl::StatusOr<Computed> ComputeStep(const StepEnvironment& env, int64_t step, absl::Time start,
                                     absl::Span<const float> weights, absl::Span<float> gradient,
                                     absl::Span<const float> rows = {},
                                     absl::Span<float> row_grads = {}) {
  Computed c;
  c.computing = absl::Now();
  if (env.row_dim > 0) {
    ASSIGN_OR_RETURN(c.batch, env.gradient.Compute(step, weights, gradient, rows, row_grads));
  } else {
    ASSIGN_OR_RETURN(c.batch, env.gradient.Compute(step, weights, gradient));
  }
  c.computed = absl::Now();
  const absl::Duration delay =
      env.delays.DelayFor(step, (c.computed - start) + env.accounting.last_push());
  if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
  c.pushing = absl::Now();
  return c;
}

CompletedStep Complete(int64_t step, absl::Time start, PullStats pulled, const Computed& c,
                       const PushStats& pushed, absl::Time end) {
  return CompletedStep{step,        pulled,     pushed,    c.batch, start,
                       c.computing, c.computed, c.pushing, end};
}

// A sparse model's rows of one step: pulled before it computes, and their gradients.
struct StepRows {
  std::vector<float> values, grads;
};

// kSequential and kPushPull: one step after another in one weights and one gradient buffer (and
// with a sparse table, the step's rows: the next step's arrive with this step's PushPull).
class SequentialSchedule final : public StepSchedule {
 public:
  SequentialSchedule(const StepEnvironment& env, bool push_pull)
      : env_(env), push_pull_(push_pull) {}

  absl::Status Step(int64_t step) override {
    const absl::Time start = absl::Now();
    const absl::Span<float> weights = env_.buffers.weights();
    const absl::Span<float> gradient = env_.buffers.gradient();
    PullStats pulled;
    if (carried_step_ == step) {
      pulled = std::move(carried_);  // arrived with the last push
      carried_step_ = -1;
      std::swap(rows_, next_rows_);
    } else {
      const std::vector<RowsToPull> rows = RowsOf(step, &rows_);
      ASSIGN_OR_RETURN(pulled, env_.client.PullWithRows(step, /*no_wait=*/false, weights, rows));
    }
    rows_.grads.resize(rows_.values.size());
    ASSIGN_OR_RETURN(const Computed c, ComputeStep(env_, step, start, weights, gradient,
                                                   rows_.values, absl::MakeSpan(rows_.grads)));
    const int count = static_cast<int>(c.batch.count);
    std::vector<RowsToPush> push_rows;
    if (env_.row_dim > 0) push_rows.push_back({0, env_.gradient.StepKeys(step), rows_.grads});
    PushStats pushed;
    if (push_pull_ && step + 1 < env_.total_steps) {
      const std::vector<RowsToPull> next_rows = RowsOf(step + 1, &next_rows_);
      ASSIGN_OR_RETURN(PushPullStats both,
                       env_.client.PushPullWithRows(step, pulled.versions, count, gradient,
                                                    push_rows, step + 1, weights, next_rows));
      pushed = both.pushed;
      carried_ = std::move(both.pulled);
      carried_step_ = step + 1;
    } else {
      ASSIGN_OR_RETURN(pushed,
                       env_.client.PushWithRows(step, pulled.versions, count, gradient, push_rows));
    }
    CompletedStep done = Complete(step, start, std::move(pulled), c, pushed, absl::Now());
    if (env_.row_dim > 0) {
      done.unique_keys = static_cast<int64_t>(env_.gradient.StepKeys(step).size());
    }
    return env_.accounting.Finish(std::move(done));
  }
  absl::Status Flush() override { return absl::OkStatus(); }
  void Drain() override { carried_step_ = -1; }
  absl::Span<const float> weights() const override { return env_.buffers.weights(); }

 private:
  // The rows `step` pulls into `into` (none for a dense model).
  std::vector<RowsToPull> RowsOf(int64_t step, StepRows* into) {
    if (env_.row_dim == 0) return {};
    const std::vector<uint64_t>& keys = env_.gradient.StepKeys(step);
    into->values.resize(keys.size() * env_.row_dim);
    return {RowsToPull{0, keys, absl::MakeSpan(into->values)}};
  }

  const StepEnvironment env_;
  const bool push_pull_;
  int64_t carried_step_ = -1;  // the step whose weights the last PushPull brought; -1: none
  PullStats carried_;
  StepRows rows_, next_rows_;  // this step's and (push-pull) the next one's
};

// kOverlap, kAsyncPush, kOverlapAsyncPush and kPipelined: two weights buffers (a prefetch or a
// pipelined pull lands in the one no step computes from) and/or two gradient buffers (the next
// step computes while this one's is pushed). A worker's pushes still reach the shards in clock
// order: step c's push is settled after step c+1's compute, before step c+1's push.
class DoubleBufferedSchedule final : public StepSchedule {
 public:
  DoubleBufferedSchedule(const StepEnvironment& env, Schedule schedule)
      : env_(env),
        overlap_(NeedsSecondWeights(schedule)),
        async_push_(NeedsSecondGradient(schedule)),
        pipelined_(schedule == Schedule::kPipelined),
        weights_(env.buffers.weights()),
        next_weights_(env.buffers.second_weights()),
        gradient_(env.buffers.gradient()),
        next_gradient_(env.buffers.second_gradient()) {
    if (async_push_) push_thread_ = std::make_unique<TaskPool>(1);
  }
  ~DoubleBufferedSchedule() override { Drain(); }  // nothing in flight outlives the buffers

  absl::Status Step(int64_t step) override {
    const absl::Time start = absl::Now();
    // Pipelined: the call in flight may be bringing this step's weights.
    if (pipelined_ && carried_step_ != step && in_flight_.has_value() &&
        in_flight_->pull_clock == step) {
      RETURN_IF_ERROR(Settle());
    }
    ASSIGN_OR_RETURN(PullStats pulled, TakeWeights(step));
    ASSIGN_OR_RETURN(const Computed c, ComputeStep(env_, step, start, weights_, gradient_));
    const int count = static_cast<int>(c.batch.count);
    if (!async_push_) {
      ASSIGN_OR_RETURN(const PushStats pushed,
                       env_.client.Push(step, pulled.versions, count, gradient_));
      return env_.accounting.Finish(
          Complete(step, start, std::move(pulled), c, pushed, absl::Now()));
    }
    RETURN_IF_ERROR(Settle());
    // Pipelined: pull the step after next into the buffer this step computed from (free now)
    // when the next step's weights are here or being prefetched (into the other buffer), else the
    // next step's into the other buffer; nothing past the last step.
    int64_t pull_clock = -1;
    absl::Span<float> into;
    if (pipelined_) {
      const bool next_here =
          carried_step_ == step + 1 || (prefetch_.valid() && prefetch_step_ == step + 1);
      pull_clock = next_here ? step + 2 : step + 1;
      into = next_here ? weights_ : next_weights_;
      if (pull_clock >= env_.total_steps) pull_clock = -1;
    }
    in_flight_ = InFlightPush{
        step,
        pulled,
        c,
        start,
        pull_clock,
        into,
        push_thread_->Submit([&client = env_.client, step, count, pull_clock, into, g = gradient_,
                              versions = pulled.versions]() -> absl::StatusOr<PushPullStats> {
          if (pull_clock >= 0) {
            return client.PushPull(step, versions, count, g, pull_clock, into);
          }
          PushPullStats only_pushed;
          ASSIGN_OR_RETURN(only_pushed.pushed, client.Push(step, versions, count, g));
          return only_pushed;
        })};
    std::swap(gradient_, next_gradient_);  // the next step computes while this one is pushed
    return absl::OkStatus();               // accounted for when its push is settled
  }

  absl::Status Flush() override { return Settle(); }

  void Drain() override {
    DrainPrefetch();
    carried_step_ = -1;
    if (in_flight_.has_value()) {
      in_flight_->result.get().IgnoreError();
      in_flight_.reset();
    }
  }

  absl::Span<const float> weights() const override { return weights_; }

 private:
  // A push in flight; pipelined, it also pulls step `pull_clock` into `weights`.
  struct InFlightPush {
    int64_t step = 0;
    PullStats pulled;
    Computed computed;
    absl::Time start;
    int64_t pull_clock = -1;  // -1: a push alone
    absl::Span<float> weights;
    std::future<absl::StatusOr<PushPullStats>> result;
  };

  // Step `step`'s weights into weights_: from a prefetch (only what is left of it is waited for),
  // from a pipelined pull, or pulled now. Starts the next step's prefetch where the schedule has
  // one and no pipelined pull brings it (first step, or after a Drain).
  absl::StatusOr<PullStats> TakeWeights(int64_t step) {
    absl::StatusOr<PullStats> pull;
    if (prefetch_.valid() && prefetch_step_ == step) {
      pull = prefetch_.get();
      std::swap(weights_, next_weights_);
    } else if (carried_step_ == step) {
      pull = std::move(carried_);
      carried_step_ = -1;
      if (carried_weights_.data() != weights_.data()) std::swap(weights_, next_weights_);
    } else {
      DrainPrefetch();  // a prefetch of another step (after a rejoin)
      pull = env_.client.Pull(step, /*no_wait=*/false, weights_);
    }
    const bool next_coming =
        pipelined_ && (carried_step_ == step + 1 ||
                       (in_flight_.has_value() && in_flight_->pull_clock == step + 1));
    if (overlap_ && !next_coming && pull.ok() && step + 1 < env_.total_steps) {
      prefetch_step_ = step + 1;
      prefetch_ = std::async(std::launch::async,
                             [&client = env_.client, next = step + 1, out = next_weights_] {
                               return client.Pull(next, /*no_wait=*/false, out);
                             });
    }
    return pull;
  }

  // Waits for the push in flight, if any, and accounts for its step; the time waited is that
  // step's push time. An error is the push's. Weights it pulled are carried.
  absl::Status Settle() {
    if (!in_flight_.has_value()) return absl::OkStatus();
    const absl::Time wait_start = absl::Now();
    absl::StatusOr<PushPullStats> both = in_flight_->result.get();
    InFlightPush done = std::move(*in_flight_);
    in_flight_.reset();
    RETURN_IF_ERROR(both.status());
    const absl::Duration push_time = absl::Now() - wait_start;
    if (done.pull_clock >= 0) {
      carried_ = std::move(both->pulled);
      carried_step_ = done.pull_clock;
      carried_weights_ = done.weights;
    }
    return env_.accounting.Finish(Complete(done.step, done.start, std::move(done.pulled),
                                           done.computed, both->pushed,
                                           done.computed.pushing + push_time));
  }

  void DrainPrefetch() {
    if (prefetch_.valid()) prefetch_.get().IgnoreError();
    prefetch_step_ = -1;
  }

  const StepEnvironment env_;
  const bool overlap_, async_push_, pipelined_;
  // Swapped as steps alternate between the buffers.
  absl::Span<float> weights_, next_weights_, gradient_, next_gradient_;
  std::future<absl::StatusOr<PullStats>> prefetch_;  // of step prefetch_step_ into next_weights_
  int64_t prefetch_step_ = -1;
  // The weights of step carried_step_ (-1: none) are in carried_weights_, pulled with a push.
  int64_t carried_step_ = -1;
  PullStats carried_;
  absl::Span<float> carried_weights_;
  std::optional<InFlightPush> in_flight_;
  std::unique_ptr<TaskPool> push_thread_;
};

}  // namespace

std::unique_ptr<StepSchedule> MakeStepSchedule(Schedule schedule, const StepEnvironment& env) {
  switch (schedule) {
    case Schedule::kSequential:
    case Schedule::kPushPull:
      return std::make_unique<SequentialSchedule>(env, schedule == Schedule::kPushPull);
    case Schedule::kPriority:
      return MakePrioritySchedule(env);
    default:
      return std::make_unique<DoubleBufferedSchedule>(env, schedule);
  }
}

}  // namespace ps
