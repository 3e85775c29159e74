#include "worker/step_schedule.h"

#include <algorithm>
#include <future>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
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

std::string ScheduleShortfall(const ScheduleRequest& request, ConsistencyMode mode, int staleness) {
  // ASP with a bound to spare serves every request; what another mode picks differently is what
  // it left out.
  if (ChooseSchedule(request, mode, staleness) ==
      ChooseSchedule(request, ConsistencyMode::kAsp, 1)) {
    return "";
  }
  if (mode == ConsistencyMode::kBsp) {
    const char* flags = request.overlap && request.async_push ? "--overlap and --async_push"
                        : request.overlap                     ? "--overlap"
                                                              : "--async_push";
    return absl::StrCat(flags,
                        " left out under BSP: the pull of step c+1 waits for the round this "
                        "worker's push of step c completes, so there is nothing to overlap");
  }
  return "the PushPull pipeline left out under SSP with --staleness 0 (its pull of step c+2, sent "
         "with the push of step c, would wait for this worker's own push of step c+1): separate "
         "pulls and pushes instead";
}

bool CarriesRows(Schedule schedule) { return schedule != Schedule::kPriority; }

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
// The delay scales this worker's own work: the step so far and the last push, less the time the
// shards held the pull that brought `weights` (`pulled.server_wait`: waiting for other workers,
// whose injected delays it holds; counted, a delay would feed every other worker's, and under
// BSP the run would slow down step after step). A prefetch may have waited out part of that
// hold before the step began, so the own work is never taken below the compute.
// With a sparse table, `rows` are the step's and `row_grads` receive their gradients.
absl::StatusOr<Computed> ComputeStep(const StepEnvironment& env, int64_t step, absl::Time start,
                                     const PullStats& pulled, absl::Span<const float> weights,
                                     absl::Span<float> gradient, absl::Span<const float> rows = {},
                                     absl::Span<float> row_grads = {}) {
  Computed c;
  c.computing = absl::Now();
  if (env.row_dim > 0) {
    ASSIGN_OR_RETURN(c.batch, env.gradient.Compute(step, weights, gradient, rows, row_grads));
  } else {
    ASSIGN_OR_RETURN(c.batch, env.gradient.Compute(step, weights, gradient));
  }
  c.computed = absl::Now();
  const absl::Duration own_work =
      std::max(c.computed - c.computing,
               (c.computed - start) + env.accounting.last_push() - pulled.server_wait);
  const absl::Duration delay = env.delays.DelayFor(step, own_work);
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
    ASSIGN_OR_RETURN(const Computed c, ComputeStep(env_, step, start, pulled, weights, gradient,
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
//
// With a sparse table, each buffer carries its step's rows: a weights buffer the keys and rows
// pulled with its weights, a gradient buffer the keys and row gradients pushed with its
// gradient. The keys are copied out of StepGradient (whose cache moves on as later steps are
// pulled) on this thread, before a call that reads them is started, and stay put until it is
// settled.
class DoubleBufferedSchedule final : public StepSchedule {
 public:
  DoubleBufferedSchedule(const StepEnvironment& env, Schedule schedule)
      : env_(env),
        overlap_(NeedsSecondWeights(schedule)),
        async_push_(NeedsSecondGradient(schedule)),
        pipelined_(schedule == Schedule::kPipelined) {
    weights_slots_[0].weights = env.buffers.weights();
    weights_slots_[1].weights = env.buffers.second_weights();
    gradient_slots_[0].gradient = env.buffers.gradient();
    gradient_slots_[1].gradient = env.buffers.second_gradient();
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
    GradientSlot& out = *gradient_;
    out.keys = weights_->keys;
    out.row_grads.resize(weights_->rows.size());
    ASSIGN_OR_RETURN(const Computed c,
                     ComputeStep(env_, step, start, pulled, weights_->weights, out.gradient,
                                 weights_->rows, absl::MakeSpan(out.row_grads)));
    const int count = static_cast<int>(c.batch.count);
    const std::vector<RowsToPush> push_rows = RowsToPushOf(out);
    if (!async_push_) {
      ASSIGN_OR_RETURN(
          const PushStats pushed,
          env_.client.PushWithRows(step, pulled.versions, count, out.gradient, push_rows));
      return Finish(step, start, std::move(pulled), c, pushed, absl::Now(), out.keys.size());
    }
    RETURN_IF_ERROR(Settle());
    // Pipelined: pull the step after next into the buffer this step computed from (free now)
    // when the next step's weights are here or being prefetched (into the other buffer), else the
    // next step's into the other buffer; nothing past the last step.
    int64_t pull_clock = -1;
    WeightsSlot* into = nullptr;
    std::vector<RowsToPull> pull_rows;
    if (pipelined_) {
      const bool next_here =
          carried_step_ == step + 1 || (prefetch_.valid() && prefetch_step_ == step + 1);
      pull_clock = next_here ? step + 2 : step + 1;
      into = next_here ? weights_ : next_weights_;
      if (pull_clock >= env_.total_steps) {
        pull_clock = -1;
      } else {
        pull_rows = PrepareRows(pull_clock, into);
      }
    }
    in_flight_ =
        InFlightPush{step,
                     pulled,
                     c,
                     start,
                     pull_clock,
                     into,
                     static_cast<int64_t>(out.keys.size()),
                     push_thread_->Submit([&client = env_.client, step, count, pull_clock, into,
                                           g = out.gradient, versions = pulled.versions, push_rows,
                                           pull_rows]() -> absl::StatusOr<PushPullStats> {
                       if (pull_clock >= 0) {
                         return client.PushPullWithRows(step, versions, count, g, push_rows,
                                                        pull_clock, into->weights, pull_rows);
                       }
                       PushPullStats only_pushed;
                       ASSIGN_OR_RETURN(only_pushed.pushed,
                                        client.PushWithRows(step, versions, count, g, push_rows));
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

  absl::Span<const float> weights() const override { return weights_->weights; }

 private:
  // A weights buffer; with a sparse table, also the keys and rows of the step it holds.
  struct WeightsSlot {
    absl::Span<float> weights;
    std::vector<uint64_t> keys;
    std::vector<float> rows;
  };
  // A gradient buffer; with a sparse table, also the keys and row gradients of its step.
  struct GradientSlot {
    absl::Span<float> gradient;
    std::vector<uint64_t> keys;
    std::vector<float> row_grads;
  };

  // A push in flight; pipelined, it also pulls step `pull_clock` into `weights`.
  struct InFlightPush {
    int64_t step = 0;
    PullStats pulled;
    Computed computed;
    absl::Time start;
    int64_t pull_clock = -1;  // -1: a push alone
    WeightsSlot* weights = nullptr;
    int64_t unique_keys = 0;  // rows pushed
    std::future<absl::StatusOr<PushPullStats>> result;
  };

  // Puts step `step`'s keys in `slot` and sizes its rows: the rows a pull of `step` into the
  // slot fills (none for a dense model). Only on this thread, with no call using the slot.
  std::vector<RowsToPull> PrepareRows(int64_t step, WeightsSlot* slot) {
    if (env_.row_dim == 0) return {};
    slot->keys = env_.gradient.StepKeys(step);
    slot->rows.resize(slot->keys.size() * env_.row_dim);
    return {RowsToPull{0, slot->keys, absl::MakeSpan(slot->rows)}};
  }

  std::vector<RowsToPush> RowsToPushOf(const GradientSlot& slot) const {
    if (env_.row_dim == 0) return {};
    return {RowsToPush{0, slot.keys, slot.row_grads}};
  }

  absl::Status Finish(int64_t step, absl::Time start, PullStats pulled, const Computed& c,
                      const PushStats& pushed, absl::Time end, size_t unique_keys) {
    CompletedStep done = Complete(step, start, std::move(pulled), c, pushed, end);
    if (env_.row_dim > 0) done.unique_keys = static_cast<int64_t>(unique_keys);
    return env_.accounting.Finish(std::move(done));
  }

  // Step `step`'s weights (and rows) into weights_: from a prefetch (only what is left of it is
  // waited for), from a pipelined pull, or pulled now. Starts the next step's prefetch where the
  // schedule has one and no pipelined pull brings it (first step, or after a Drain).
  absl::StatusOr<PullStats> TakeWeights(int64_t step) {
    absl::StatusOr<PullStats> pull;
    if (prefetch_.valid() && prefetch_step_ == step) {
      pull = prefetch_.get();
      std::swap(weights_, next_weights_);
    } else if (carried_step_ == step) {
      pull = std::move(carried_);
      carried_step_ = -1;
      if (carried_weights_ != weights_) std::swap(weights_, next_weights_);
    } else {
      DrainPrefetch();  // a prefetch of another step (after a rejoin)
      const std::vector<RowsToPull> rows = PrepareRows(step, weights_);
      pull = env_.client.PullWithRows(step, /*no_wait=*/false, weights_->weights, rows);
    }
    const bool next_coming =
        pipelined_ && (carried_step_ == step + 1 ||
                       (in_flight_.has_value() && in_flight_->pull_clock == step + 1));
    if (overlap_ && !next_coming && pull.ok() && step + 1 < env_.total_steps) {
      prefetch_step_ = step + 1;
      prefetch_ = std::async(std::launch::async,
                             [&client = env_.client, next = step + 1, out = next_weights_->weights,
                              rows = PrepareRows(step + 1, next_weights_)] {
                               return client.PullWithRows(next, /*no_wait=*/false, out, rows);
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
    return Finish(done.step, done.start, std::move(done.pulled), done.computed, both->pushed,
                  done.computed.pushing + push_time, static_cast<size_t>(done.unique_keys));
  }

  void DrainPrefetch() {
    if (prefetch_.valid()) prefetch_.get().IgnoreError();
    prefetch_step_ = -1;
  }

  const StepEnvironment env_;
  const bool overlap_, async_push_, pipelined_;
  WeightsSlot weights_slots_[2];
  GradientSlot gradient_slots_[2];
  // Swapped as steps alternate between the buffers (the second of a kind is empty unless the
  // schedule has one).
  WeightsSlot* weights_ = &weights_slots_[0];
  WeightsSlot* next_weights_ = &weights_slots_[1];
  GradientSlot* gradient_ = &gradient_slots_[0];
  GradientSlot* next_gradient_ = &gradient_slots_[1];
  std::future<absl::StatusOr<PullStats>> prefetch_;  // of step prefetch_step_ into next_weights_
  int64_t prefetch_step_ = -1;
  // The weights of step carried_step_ (-1: none) are in carried_weights_, pulled with a push.
  int64_t carried_step_ = -1;
  PullStats carried_;
  WeightsSlot* carried_weights_ = nullptr;
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
