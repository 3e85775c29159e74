#ifndef PS_WORKER_STEP_SCHEDULE_H_
#define PS_WORKER_STEP_SCHEDULE_H_

// How a worker arranges the pull, compute and push of its steps. The trainer picks one schedule
// at start-up (ChooseSchedule) and runs its steps in order; the schedule hands every step whose
// push was acknowledged to StepAccounting, in step order. All schedules compute the same
// gradients of the same weights under BSP (bit for bit); under SSP and ASP the overlapping ones
// compute from weights up to one more update stale, within the bound the shards enforce.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/base/consistency_mode.h"
#include "worker/delay_injector.h"
#include "worker/parameter_client.h"
#include "worker/step_accounting.h"
#include "worker/step_buffers.h"
#include "worker/step_gradient.h"

namespace ps {

enum class Schedule {
  kSequential,        // pull, compute, push: a call each
  kPushPull,          // each push brings the next step's weights (one round trip per step)
  kOverlap,           // SSP/ASP: step c+1's weights are prefetched while step c computes and pushes
  kAsyncPush,         // SSP/ASP: step c's push travels while step c+1 pulls and computes
  kOverlapAsyncPush,  // both: the pull, compute and push of three steps at once
  // SSP (bound >= 1)/ASP: as kOverlapAsyncPush with one PushPull per step: step c's call pushes
  // c and pulls c+2 into the buffer step c computed from, while c+1 computes.
  kPipelined,
  // Any mode: weights pulled one layer (part) per call, first layer first, each forward layer
  // starting once its weights are in; each gradient pushed as backward produces it, last layer
  // first. The shards apply a step only once all its pieces are in.
  kPriority,
};

std::string ScheduleName(Schedule schedule);

// What the worker's flags ask for.
struct ScheduleRequest {
  // SSP and ASP: pull the next step's weights while this step computes and pushes. The gradient
  // of step c is then computed from weights that may lack this worker's own gradient of step c-1
  // (one more update of staleness, still within the SSP bound the shards enforce on every pull).
  bool overlap = false;
  // SSP and ASP: push step c's gradient on another thread while step c+1 pulls and computes; it
  // is waited for after that compute, before step c+1's push. The gradient of step c+1 may then
  // miss this worker's own gradient of step c (one more update of staleness, within the SSP
  // bound). A step's push time is what the worker waited for it. With `overlap` the pull, the
  // compute and the push of three consecutive steps run at once.
  bool async_push = false;
  // Steps that run one after another push step c and pull step c+1 in one round trip per shard
  // (ParameterClient::PushPull). The shards do exactly what a Push and then a Pull would; a
  // step's push time then includes the next step's pull, whose own pull time is what remained of
  // it (nothing).
  bool push_pull = true;
  // Priority scheduling (P3, BytePS), any mode: weights are pulled one layer per call, first
  // layer first, and each layer's forward starts as soon as its weights have arrived; each
  // layer's gradient is pushed as soon as backward has produced it, last layer first, while
  // backward goes on below. The shards apply a step only once all its pieces are in, so the
  // results are those of whole pushes (BSP: bit for bit). Not with `overlap`, `async_push` or
  // injected delays.
  bool priority = false;
};

// The schedule that serves `request` in `mode`. BSP's pull of step c+1 needs this worker's push
// of step c, so overlap and asynchronous pushes have nothing to gain there and are dropped;
// pipelining needs an SSP bound of at least 1 (the pull of c+2 right after the push of c).
// The request's alternatives (priority with overlap or asynchronous pushes) are refused by
// ValidateTrainerOptions before.
Schedule ChooseSchedule(const ScheduleRequest& request, ConsistencyMode mode, int staleness);

// What of `request` the schedule ChooseSchedule picks leaves out, and why, for the worker's log
// (a sweep may ask for the same schedule in every mode, so this is a warning, not an error);
// empty when the schedule serves all of the request.
std::string ScheduleShortfall(const ScheduleRequest& request, ConsistencyMode mode, int staleness);

// Whether `schedule` computes in a second weights or gradient buffer (see StepBuffers).
bool NeedsSecondWeights(Schedule schedule);
bool NeedsSecondGradient(Schedule schedule);

// What every schedule works with; all of it must outlive the schedule.
struct StepEnvironment {
  ParameterClient& client;
  StepGradient& gradient;
  DelayInjector& delays;  // not used by kPriority (ValidateTrainerOptions refuses delays there)
  StepAccounting& accounting;
  const StepBuffers& buffers;
  int64_t total_steps = 0;
  int samples_per_step = 0;
  std::vector<KeyRange> priority_parts;  // kPriority: the parts, in forward order (MergeParts)
  // Models with a sparse table (every schedule but kPriority): its row width; each step pulls
  // the rows of StepGradient::StepKeys with its weights and pushes their gradients with its own.
  int64_t row_dim = 0;
};

// Whether `schedule` can carry a sparse table's rows: every one that pulls and pushes whole
// steps (not kPriority, whose pieces the shards refuse rows with).
bool CarriesRows(Schedule schedule);

class StepSchedule {
 public:
  virtual ~StepSchedule() = default;
  // Runs step `step` as the schedule arranges it and accounts for every step whose push is
  // acknowledged by now. Steps come in increasing order. After an error the caller calls Drain
  // before anything else; ABORTED (lease expired, shard restarted, rank taken) means: register
  // again and go on from the shards' clock.
  virtual absl::Status Step(int64_t step) = 0;
  // After the last step: waits for what is still in flight and accounts for it.
  virtual absl::Status Flush() = 0;
  // Settles and forgets every call in flight and any weights carried for a later step. Their
  // steps are not accounted for: the worker resumes at the clock the shards report, which counts
  // a push if it landed.
  virtual void Drain() = 0;
  // The weights of the step pulled last: offered to shards that lost theirs.
  virtual absl::Span<const float> weights() const = 0;
};

std::unique_ptr<StepSchedule> MakeStepSchedule(Schedule schedule, const StepEnvironment& env);
// kPriority's, for MakeStepSchedule (priority_schedule.cc).
std::unique_ptr<StepSchedule> MakePrioritySchedule(const StepEnvironment& env);

// The parts priority scheduling sends: `layers` (contiguous key ranges in forward order), each
// layer of fewer than `min_part` keys joined to the part before it. The first layer always
// starts a part of its own: pulled first and pushed last, it is best small (forward starts
// sooner, the last push after backward is shorter).
std::vector<KeyRange> MergeParts(const std::vector<KeyRange>& layers, int64_t min_part);

}  // namespace ps

#endif  // PS_WORKER_STEP_SCHEDULE_H_
