#ifndef PS_WORKER_WORK_ACCOUNT_H_
#define PS_WORKER_WORK_ACCOUNT_H_

// Work conservation, read off the shards' reports: what each worker declared it would train,
// what the shards applied of it, and what no update will ever contain. A job that was asked to
// train all of its work uses this to say exactly what was skipped and to fail when anything was.
//
// Per rank r over S shards: its planned steps P (as it declared; a rank that never declared is
// taken to owe the most any rank declared, as the ranks of ps_worker push the same number of
// steps; a live one that has not declared is never taken as finished, since a Python rank may
// take more steps than the others), gradients expected S x P, gradients applied (every shard's
// count: applied alone or within a BSP round), and steps skipped P - min over shards of the applied
// ones: a step some shard never applied is not fully trained. Its samples skipped are those steps x
// its samples per step.

#include <cstdint>
#include <string>
#include <vector>

#include "worker/parameter_client.h"

namespace ps {

struct WorkerWork {
  int rank = 0;
  std::string state;  // "finished", "live", "gone" (lease expired) or "pending" (never came)
  int64_t planned_steps = 0;
  int64_t samples_per_step = 0;
  int64_t gradients_expected = 0;
  int64_t gradients_applied = 0;
  int64_t steps_skipped = 0;
  int64_t samples_skipped = 0;
};

// Calls `field(name, value)` for each field of a worker's account that the reports show
// (summary.json's "work", ps_train's work_account()), in their order: one list of names for every
// format.
template <typename FieldFn>
void ForEachReportedField(const WorkerWork& w, FieldFn&& field) {
  field("rank", w.rank);
  field("state", w.state);
  field("planned_steps", w.planned_steps);
  field("gradients_expected", w.gradients_expected);
  field("gradients_applied", w.gradients_applied);
  field("steps_skipped", w.steps_skipped);
  field("samples_skipped", w.samples_skipped);
}

struct WorkAccount {
  std::vector<WorkerWork> workers;  // by rank
  int64_t gradients_expected = 0;
  int64_t gradients_applied = 0;
  int64_t samples_skipped = 0;
  // No worker can add to the result any more: some rank declared its work, and every rank has
  // pushed all of it on every shard or is gone (lease expired everywhere). A pending rank (never
  // registered) holds a BSP job back, so it is not done.
  bool job_done = false;
  // Some shard restored a checkpoint that already held a finished job.
  bool finished_at_restore = false;
};

// `reports` from ParameterClient::Status(), one per shard, each listing every rank.
WorkAccount AccountWork(const std::vector<ShardReport>& reports);

}  // namespace ps

#endif  // PS_WORKER_WORK_ACCOUNT_H_
