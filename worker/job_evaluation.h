#ifndef PS_WORKER_JOB_EVALUATION_H_
#define PS_WORKER_JOB_EVALUATION_H_

// The job's final evaluation (ps_worker --evaluate, an observer): waits until no worker can add
// to the result, reads the shards' weights, measures them on the test set, and reports them with
// the shards' staleness statistics and the job's work account (what was trained, what skipped).

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/data/dataset.h"
#include "common/device/device.h"
#include "common/nn/model.h"
#include "worker/parameter_client.h"

namespace ps {

struct JobEvaluationOptions {
  // First wait up to this long until every worker has pushed all its steps or is gone; zero:
  // evaluate at once.
  absl::Duration wait_for_job;
  // Whether skipped work fails the job, given whether the job is meant to hold all of it (BSP
  // without backup workers): --require_all_work's resolution (RequireAllWorkFromFlags).
  std::function<absl::StatusOr<bool>(bool all_work_by_design)> require_all_work;
  std::string summary_out;  // the result as one JSON object; empty: not written
  std::string weights_out;  // the weights as raw float32; empty: not written
};

// Evaluates the job and prints its result (two lines, and one per worker that skipped work).
// Returns false when all work was required and some was skipped: the result is written and
// printed all the same. FAILED_PRECONDITION when the shards hold a job that had finished before
// they restarted or before this run's workers started (its result is not new); CANCELLED when
// `stop` becomes true while waiting; DEADLINE_EXCEEDED naming the workers still expected.
absl::StatusOr<bool> EvaluateJob(Model& model, Device& device, ParameterClient& client,
                                 const Dataset& test, const JobEvaluationOptions& options,
                                 const std::atomic<bool>& stop);

}  // namespace ps

#endif  // PS_WORKER_JOB_EVALUATION_H_
