#ifndef PS_WORKER_JOB_REPORT_H_
#define PS_WORKER_JOB_REPORT_H_

// The job's report, read off the shards' reports: the staleness statistics and counters summed
// over shards and workers, the sparse tables' totals, and the work account. What ps_worker
// --evaluate writes beside its measures of the model (eval.json), and what a Python job's rank 0
// writes at ps_train's finish() (job_report.json): one set of fields for summary.json either way.

#include <vector>

#include "common/base/json_lines.h"
#include "worker/parameter_client.h"
#include "worker/work_account.h"

namespace ps {

// Adds the report's fields to `out`; `require_all` is whether skipped work fails the job.
void AddJobReport(const std::vector<ShardReport>& reports, const WorkAccount& work,
                  bool require_all, JsonObject* out);

}  // namespace ps

#endif  // PS_WORKER_JOB_REPORT_H_
