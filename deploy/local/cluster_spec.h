#ifndef PS_DEPLOY_LOCAL_CLUSTER_SPEC_H_
#define PS_DEPLOY_LOCAL_CLUSTER_SPEC_H_

// What ps_launch runs, read once from its flags: the cluster's shape, the run folder, the
// per-worker faults it injects, and the command line of every child. The flags of the binaries
// (the shards', the workers', the workload's, the optimizer's) are theirs, defined once; the
// launcher passes them on by name (ForwardedFlags).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/cli/workload_flags.h"
#include "common/optim/optimizer.h"

namespace ps {

// In the run folder: where a --python job's rank 0 writes the job's report at ps_train's finish()
// (PS_JOB_REPORT; worker/job_report.h), which summary.json takes in.
inline constexpr char kJobReportFile[] = "job_report.json";

struct ClusterSpec {
  int shards = 2;
  int workers = 2;
  Workload workload;
  OptimizerOptions optimizer;  // as the shards will apply it (after linear scaling)
  bool bsp = true;
  int64_t per_push = 0;      // samples behind one worker's push: batch x accumulation
  int64_t update_batch = 0;  // samples behind one shard update: a BSP round's, else per_push
  bool require_all_work = true;
  std::vector<double> slowdown;    // per rank (--straggler)
  std::vector<std::string> pause;  // per rank, STEP:SECONDS or empty (--pause_worker)
  std::string run_dir;             // --metrics_dir, or runs/<time> (see CreateRunDir)
  std::string bin_dir;             // where ps_server and ps_worker are
  bool record_updates = false;     // shards record their update order (--replayable)
  // --python: each worker runs this script with these arguments instead of ps_worker.
  std::string python_script;
  std::vector<std::string> python_args;
  std::string python_path;  // the folder holding the ps_train package (beside bin_dir)
  // Flags passed on by name: to every shard, to every worker, and both.
  std::vector<std::string> shard_flags, worker_flags, optimizer_flags, workload_flags;

  std::string RunFile(const std::string& name) const { return run_dir + "/" + name; }
};

// The launcher's flags, checked, and the shards' as every shard will read them: INVALID_ARGUMENT
// naming what is wrong (the launcher exits 2). Writes nothing. `args`: the positional arguments,
// which only --python takes (the script's).
absl::StatusOr<ClusterSpec> ClusterSpecFromFlags(const std::vector<std::string>& args = {});

// `command` as one line a POSIX shell reads back word for word: each argument bare when it holds
// nothing the shell treats specially, else in single quotes.
std::string ShellLine(const std::vector<std::string>& command);

// Creates spec.run_dir (and its parents); INVALID_ARGUMENT when it cannot.
absl::Status CreateRunDir(const ClusterSpec& spec);

// Shard `shard`'s checkpoint folder, <--checkpoint_root>/ps-<shard> (empty without a root).
std::string ShardCheckpointDir(int shard);

// Shard `shard`'s command line; it writes its port to `port_file`.
std::vector<std::string> ShardCommand(const ClusterSpec& spec, int shard,
                                      const std::string& port_file);
// Worker `rank`'s command line, given the shards' addresses ("h:p,h:p"): ps_worker, or with
// --python the script under the interpreter, its settings in PS_* environment variables (the
// names ps_train and the binaries read).
std::vector<std::string> WorkerCommand(const ClusterSpec& spec, int rank,
                                       const std::string& servers);
// The final evaluation's (ps_worker --evaluate) command line; it writes `summary_out`.
std::vector<std::string> EvaluationCommand(const ClusterSpec& spec, const std::string& servers,
                                           const std::string& summary_out);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_CLUSTER_SPEC_H_
