#ifndef PS_DEPLOY_LOCAL_RUN_SUMMARY_H_
#define PS_DEPLOY_LOCAL_RUN_SUMMARY_H_

// <run_dir>/summary.json: the run's configuration, its throughput (from the workers' metrics
// lines), and the final evaluation's result (eval.json: accuracy, staleness, the work account).

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "deploy/local/cluster_spec.h"
#include "nlohmann/json.hpp"

namespace ps {

struct RunOutcome {
  absl::Duration train_wall;  // from the first worker's start to the last one's exit
  int worker_restarts = 0;
  int shard_restarts = 0;
  int shard_rollbacks = 0;  // times every shard went back to one checkpoint (--rollback_shards)
};

// The summary of a finished run whose evaluation wrote `eval_path`. DATA_LOSS when that file is
// not the evaluation's JSON object.
absl::StatusOr<nlohmann::json> SummarizeRun(const ClusterSpec& spec, const RunOutcome& outcome,
                                            const std::string& eval_path);

// The summary of a finished --python run: its shape and wall time, and the job's report that
// rank 0's ps_train.torch.finish() wrote (kJobReportFile: staleness, counters, the work account,
// and the measures the script added with report_result()). A script that never called finish()
// leaves none: the summary's "job_report" then says so. DATA_LOSS when the report is there but
// not a JSON object.
absl::StatusOr<nlohmann::json> SummarizePythonRun(const ClusterSpec& spec,
                                                  const RunOutcome& outcome);

// Writes <run_dir>/replay.cmd: the ps_replay command that reproduces the run from the shards'
// update records (ps_launch --replayable).
absl::Status WriteReplayCommand(const ClusterSpec& spec, int64_t decay_updates);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_RUN_SUMMARY_H_
