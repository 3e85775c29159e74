#include "worker/work_account.h"

#include <algorithm>
#include <limits>

namespace ps {

WorkAccount AccountWork(const std::vector<ShardReport>& reports) {
  WorkAccount account;
  size_t ranks = 0;
  int64_t job_steps = 0, job_samples = 0;
  for (const ShardReport& r : reports) {
    ranks = std::max(ranks, r.workers.size());
    account.finished_at_restore = account.finished_at_restore || r.finished_at_restore;
    for (const ShardReport::Worker& w : r.workers) {
      job_steps = std::max(job_steps, w.planned_steps);
      job_samples = std::max(job_samples, w.samples_per_step);
    }
  }
  const int64_t shards = static_cast<int64_t>(reports.size());
  account.job_done = job_steps > 0;
  for (size_t rank = 0; rank < ranks; ++rank) {
    WorkerWork work;
    work.rank = static_cast<int>(rank);
    int64_t min_applied = std::numeric_limits<int64_t>::max();
    int64_t min_clock = std::numeric_limits<int64_t>::max();
    bool live = false, pending = false;
    for (const ShardReport& r : reports) {
      if (rank >= r.workers.size()) {  // a shard that does not know the rank applied nothing
        min_applied = 0;
        min_clock = 0;
        pending = true;
        continue;
      }
      const ShardReport::Worker& w = r.workers[rank];
      work.planned_steps = std::max(work.planned_steps, w.planned_steps);
      work.samples_per_step = std::max(work.samples_per_step, w.samples_per_step);
      work.gradients_applied += w.applied;
      min_applied = std::min(min_applied, w.applied);
      min_clock = std::min(min_clock, w.clock);
      live = live || w.state == "live";
      pending = pending || w.state == "pending";
    }
    const bool declared = work.planned_steps > 0;
    if (!declared) work.planned_steps = job_steps;
    if (work.samples_per_step == 0) work.samples_per_step = job_samples;
    if (reports.empty()) min_applied = min_clock = 0;
    work.gradients_expected = shards * work.planned_steps;
    work.steps_skipped = std::max<int64_t>(0, work.planned_steps - min_applied);
    work.samples_skipped = work.steps_skipped * work.samples_per_step;
    // A live rank that has not declared its own work may push on past the others' plans (ranks
    // may differ by the last partial batch): only its own word, or its leaving, ends its part.
    const bool finished =
        work.planned_steps > 0 && min_clock >= work.planned_steps && (declared || !live);
    work.state = finished ? "finished" : live ? "live" : pending ? "pending" : "gone";
    account.job_done = account.job_done && (work.state == "finished" || work.state == "gone");
    account.gradients_expected += work.gradients_expected;
    account.gradients_applied += work.gradients_applied;
    account.samples_skipped += work.samples_skipped;
    account.workers.push_back(std::move(work));
  }
  return account;
}

}  // namespace ps
