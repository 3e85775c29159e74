#include <algorithm>
#include <condition_variable>
#include <future>
#include <mutex>
#include <utility>
#include <vector>

#include "common/base/status_macros.h"
#include "worker/step_schedule.h"
#include "worker/task_pool.h"

namespace ps {

std::vector<KeyRange> MergeParts(const std::vector<KeyRange>& layers, int64_t min_part) {
  std::vector<KeyRange> parts;
  for (const KeyRange& layer : layers) {
    if (parts.size() >= 2 && layer.size() < min_part) {  // never into the first layer's part
      parts.back().end = layer.end;
    } else {
      parts.push_back(layer);
    }
  }
  return parts;
}

namespace {

// The stats of pushes that together delivered one step.
void AddPushStats(const PushStats& add, PushStats* total) {
  total->applied += add.applied;
  total->buffered += add.buffered;
  total->duplicates += add.duplicates;
  total->dropped += add.dropped;
  total->late += add.late;
  total->max_staleness = std::max(total->max_staleness, add.max_staleness);
  total->payload_bytes += add.payload_bytes;
}

// kPriority: pulls on one helper thread, pushes on two others, computes on the caller's.
class PrioritySchedule final : public StepSchedule {
 public:
  explicit PrioritySchedule(const StepEnvironment& env) : env_(env), threads_(3) {}

  absl::Status Step(int64_t step) override {
    const absl::Time start = absl::Now();
    CompletedStep done;
    done.step = step;
    StepTimes times;
    RETURN_IF_ERROR(RunStep(step, &done.pulled, &done.pushed, &done.batch, &times));
    done.start = start;
    done.computing = start + times.pull;
    done.computed = done.pushing = done.computing + times.compute;
    done.end = done.computed + times.push;
    return env_.accounting.Finish(done);
  }
  absl::Status Flush() override { return absl::OkStatus(); }
  void Drain() override {}  // nothing outlives a step
  absl::Span<const float> weights() const override { return env_.buffers.weights(); }

 private:
  // Where a step spent its time on the training thread.
  struct StepTimes {
    absl::Duration pull;     // waiting for layers' weights
    absl::Duration compute;  // forward and backward, without those waits
    absl::Duration push;     // after backward, waiting for the last gradients to be acknowledged
  };
  // The first error of the three threads is returned.
  absl::Status RunStep(int64_t step, PullStats* pulled, PushStats* pushed, BatchStats* batch,
                       StepTimes* times);

  const StepEnvironment env_;
  TaskPool threads_;  // the puller and two pushers, kept from step to step
};

absl::Status PrioritySchedule::RunStep(int64_t step, PullStats* pulled, PushStats* pushed,
                                       BatchStats* batch, StepTimes* times) {
  const std::vector<KeyRange>& parts = env_.priority_parts;
  const absl::Span<float> params = env_.buffers.weights();
  const absl::Span<float> grads = env_.buffers.gradient();
  const int num_samples = env_.samples_per_step;
  ParameterClient& client = env_.client;
  std::mutex mu;
  std::condition_variable changed;
  std::vector<bool> arrived(parts.size(), false);
  bool pull_done = false;
  absl::StatusOr<PullStats> pull_result;
  std::vector<KeyRange> to_push;  // gradients backward has produced, not yet handed to a push
  bool compute_done = false;

  // All layers' pulls go out at once, first layer first; each arrival wakes the forward pass.
  std::future<void> puller = threads_.Submit([&] {
    absl::StatusOr<PullStats> r = client.PullParts(step, parts, params, [&](size_t i) {
      const std::lock_guard<std::mutex> lock(mu);
      arrived[i] = true;
      changed.notify_all();
    });
    const std::lock_guard<std::mutex> lock(mu);
    pull_result = std::move(r);
    pull_done = true;
    changed.notify_all();
  });
  // Each pusher sends whatever backward has produced since a push last went out (one call for
  // those layers, their pieces in flight together), with the pull's versions as base versions.
  // Two of them, so that a layer produced while a push is in flight leaves at once instead of
  // after that push's round trip.
  const auto push_loop = [&]() -> absl::StatusOr<PushStats> {
    std::vector<int64_t> base_versions;
    {
      std::unique_lock<std::mutex> lock(mu);
      changed.wait(lock, [&] { return pull_done; });
      if (!pull_result.ok()) return pull_result.status();
      base_versions = pull_result->versions;
    }
    PushStats total;
    for (;;) {
      std::vector<KeyRange> ready;
      {
        std::unique_lock<std::mutex> lock(mu);
        changed.wait(lock, [&] { return !to_push.empty() || compute_done; });
        ready.swap(to_push);
      }
      if (ready.empty()) return total;  // backward is done and everything went out
      ASSIGN_OR_RETURN(const PushStats s,
                       client.PushParts(step, base_versions, num_samples, grads, ready));
      AddPushStats(s, &total);
    }
  };
  std::future<absl::StatusOr<PushStats>> pushers[] = {threads_.Submit(push_loop),
                                                      threads_.Submit(push_loop)};

  absl::Duration waited;
  StepGradient::LayerCallbacks callbacks;
  // The part that holds a layer.
  const auto part_of = [&](KeyRange layer) {
    size_t i = 0;
    while (i + 1 < parts.size() && parts[i].end <= layer.begin) ++i;
    return i;
  };
  callbacks.weights_ready = [&](KeyRange layer) -> absl::Status {
    const size_t i = part_of(layer);
    const absl::Time t = absl::Now();
    std::unique_lock<std::mutex> lock(mu);
    changed.wait(lock, [&] { return arrived[i] || pull_done; });
    waited += absl::Now() - t;
    if (arrived[i]) return absl::OkStatus();
    return pull_result.ok() ? absl::InternalError("a pulled layer never arrived")
                            : pull_result.status();
  };
  // Backward runs last layer first, so a part is complete once its first layer is.
  callbacks.gradient_ready = [&](KeyRange layer) {
    const KeyRange part = parts[part_of(layer)];
    if (layer.begin != part.begin) return absl::OkStatus();
    const std::lock_guard<std::mutex> lock(mu);
    to_push.push_back(part);
    changed.notify_all();
    return absl::OkStatus();
  };
  const absl::Time start = absl::Now();
  absl::StatusOr<BatchStats> computed =
      env_.gradient.ComputeByLayer(step, params, grads, callbacks);
  const absl::Time computed_at = absl::Now();
  {
    const std::lock_guard<std::mutex> lock(mu);
    compute_done = true;
    changed.notify_all();
  }
  puller.wait();
  absl::StatusOr<PushStats> push_result = pushers[0].get();
  absl::StatusOr<PushStats> second = pushers[1].get();
  if (push_result.ok() && second.ok()) {
    AddPushStats(*second, &*push_result);
  } else if (push_result.ok()) {
    push_result = second.status();
  }
  times->pull = waited;
  times->compute = computed_at - start - waited;
  times->push = absl::Now() - computed_at;
  // The pull's error explains the others (they stopped because of it).
  RETURN_IF_ERROR(pull_result.status());
  RETURN_IF_ERROR(computed.status());
  RETURN_IF_ERROR(push_result.status());
  *pulled = *std::move(pull_result);
  *pushed = *push_result;
  *batch = *computed;
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<StepSchedule> MakePrioritySchedule(const StepEnvironment& env) {
  return std::make_unique<PrioritySchedule>(env);
}

}  // namespace ps
