// Worker's pipelined step (SSP with a bound of at least 1, or ASP): the call of step c travels
// while step c+1 computes; two buffer sets keep the travelling gradient and the arriving weights
// apart from those the step uses.

#include "common/base/status_macros.h"
#include "spdlog/spdlog.h"
#include "worker/python/python_worker.h"

namespace ps {

std::shared_ptr<const Worker::OwnedRows> Worker::CopyRows(const std::vector<RowsToPush>& rows) {
  auto owned = std::make_shared<OwnedRows>();
  for (const RowsToPush& r : rows) {
    owned->keys.emplace_back(r.keys.begin(), r.keys.end());
    owned->gradients.emplace_back(r.gradients.begin(), r.gradients.end());
  }
  for (size_t i = 0; i < rows.size(); ++i) {  // vectors of vectors: their buffers stay put
    owned->rows.push_back(RowsToPush{rows[i].table, owned->keys[i], owned->gradients[i]});
  }
  return owned;
}

py::dict Worker::PipelinedStep(int num_samples, const std::vector<RowGradients>& rows) {
  RequireRegistered();
  if (buffer_sets_ != 2) {
    throw StatusError{
        absl::FailedPreconditionError("this worker was made with one buffer set: no pipeline")};
  }
  const absl::Time start = absl::Now();
  // Copied before anything waits: the caller's arrays are free once this returns.
  std::shared_ptr<const OwnedRows> owned_rows = CopyRows(ViewRows(rows));
  if (in_flight_.has_value()) {
    // The push names the versions this step computed from, not those the settled call brings.
    const std::vector<int64_t> computed_from = versions_;
    std::optional<InFlight> settled = Settle();
    if (settled.has_value()) {
      const int64_t clock = clock_;
      StartInFlight(clock, computed_from, num_samples, std::move(owned_rows), clock + 2,
                    1 - weights_set_);
      gradient_set_ = 1 - gradient_set_;  // the next step computes while this one travels
      clock_ = clock + 1;
      return StatsDict(settled->push_clock, settled->stats.pushed, settled->stats.pulled, start);
    }
  }
  // Nothing in flight (the first step, or a rejoin): push and pull now, then prefetch the weights
  // of the step after next into the set this step computed from.
  const int next = 1 - weights_set_;
  const int64_t clock = clock_;
  const PushPullStats stats = WithRejoin<PushPullStats>([this, num_samples, next, &owned_rows] {
    return client_->PushPullWithRows(clock_, versions_, num_samples, Gradient(), owned_rows->rows,
                                     clock_ + 1, weights_sets_[next], {});
  });
  weights_set_ = next;
  py::dict d = StepDone(clock, stats.pushed, stats.pulled, start);
  StartInFlight(/*push_clock=*/-1, {}, num_samples, nullptr, clock_ + 1, 1 - weights_set_);
  return d;
}

void Worker::RefusePipelineUnlessAsync() {
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

void Worker::StartInFlight(int64_t push_clock, std::vector<int64_t> versions, int num_samples,
                           std::shared_ptr<const OwnedRows> rows, int64_t pull_clock, int into) {
  if (pipeline_ == nullptr) pipeline_ = std::make_unique<TaskPool>(1);
  InFlight f;
  f.push_clock = push_clock;
  f.gradient_set = gradient_set_;
  f.weights_set = into;
  f.num_samples = num_samples;
  f.rows = std::move(rows);
  f.result = pipeline_->Submit([client = client_.get(), push_clock, num_samples, pull_clock,
                                versions = std::move(versions), gradient = Gradient(),
                                weights = weights_sets_[into],
                                rows = f.rows]() -> absl::StatusOr<PushPullStats> {
    if (push_clock >= 0) {
      return client->PushPullWithRows(push_clock, versions, num_samples, gradient, rows->rows,
                                      pull_clock, weights, {});
    }
    PushPullStats prefetched;
    ASSIGN_OR_RETURN(prefetched.pulled, client->Pull(pull_clock, /*no_wait=*/false, weights));
    return prefetched;
  });
  in_flight_ = std::move(f);
}

std::optional<Worker::InFlight> Worker::Settle() {
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
      return client_->PushPullWithRows(clock_, versions_, f.num_samples,
                                       gradient_sets_[f.gradient_set], f.rows->rows, clock_ + 1,
                                       Weights(), {});
    });
    versions_ = again.pulled.versions;
    ++clock_;
  }
  return std::nullopt;
}

}  // namespace ps
