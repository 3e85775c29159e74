#include "deploy/local/cluster_spec.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "common/cli/cli.h"
#include "common/cli/cluster_flags.h"
#include "common/cli/job_flags.h"
#include "common/cli/log_flags.h"
#include "common/cli/optimizer_flags.h"
#include "common/cli/token_flags.h"
#include "deploy/local/launch_flags.h"
#include "server/server_flags.h"
#include "server/shard_flags.h"
#include "worker/delay_injector.h"
#include "worker/worker_flags.h"

ABSL_DECLARE_FLAG(int64_t, base_batch);
ABSL_DECLARE_FLAG(int64_t, effective_batch);

namespace ps {

namespace {

std::string SelfDir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

// --straggler RANK:FACTOR and --pause_worker RANK:STEP:SECONDS, per rank.
absl::Status ParseWorkerFaults(ClusterSpec* spec) {
  spec->slowdown.assign(spec->workers, 1.0);
  for (const std::string& s : absl::GetFlag(FLAGS_straggler)) {
    std::vector<std::string> parts = absl::StrSplit(s, ':');
    int rank = -1;
    double factor = 0.0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &rank) ||
        !absl::SimpleAtod(parts[1], &factor) || rank < 0 || rank >= spec->workers || factor < 1.0) {
      return absl::InvalidArgumentError(absl::StrCat("--straggler '", s,
                                                     "' must be RANK:FACTOR with 0 <= RANK < ",
                                                     spec->workers, " and FACTOR >= 1"));
    }
    spec->slowdown[rank] = factor;
  }
  spec->pause.assign(spec->workers, "");
  for (const std::string& p : absl::GetFlag(FLAGS_pause_worker)) {
    std::vector<std::string> parts = absl::StrSplit(p, absl::MaxSplits(':', 1));
    int rank = -1;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &rank) || rank < 0 ||
        rank >= spec->workers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--pause_worker '", p, "' must be RANK:STEP:SECONDS with 0 <= RANK < ", spec->workers));
    }
    spec->pause[rank] = parts[1];  // STEP:SECONDS, checked by the worker
  }
  return absl::OkStatus();
}

// The run folder's name (created by CreateRunDir) and the binaries, which must be there.
absl::Status ChooseFolders(ClusterSpec* spec) {
  spec->run_dir = absl::GetFlag(FLAGS_metrics_dir);
  if (spec->run_dir.empty()) {
    spec->run_dir = absl::StrCat(
        "runs/", absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::LocalTimeZone()));
  }
  spec->bin_dir = absl::GetFlag(FLAGS_bin_dir).empty() ? SelfDir() : absl::GetFlag(FLAGS_bin_dir);
  for (const char* binary : {"ps_server", "ps_worker"}) {
    if (!spec->python_script.empty() && std::string(binary) == "ps_worker") continue;
    const std::string path = absl::StrCat(spec->bin_dir, "/", binary);
    if (access(path.c_str(), X_OK) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " is missing or not executable (see --bin_dir)"));
    }
  }
  return absl::OkStatus();
}

// The TLS and token flags for a server (is_server) or a client.
std::vector<std::string> SecurityArgs(bool is_server) {
  std::vector<std::string> args;
  const std::string dir = absl::GetFlag(FLAGS_tls_dir);
  if (!dir.empty()) {
    const std::string who = is_server ? "server" : "client";
    args.push_back(absl::StrCat("--tls_cert=", dir, "/", who, ".pem"));
    args.push_back(absl::StrCat("--tls_key=", dir, "/", who, ".key"));
    args.push_back(absl::StrCat("--tls_ca=", dir, "/ca.pem"));
  }
  if (!absl::GetFlag(FLAGS_token_file).empty()) {
    args.push_back("--token_file=" + absl::GetFlag(FLAGS_token_file));
  }
  if (absl::GetFlag(FLAGS_allow_plaintext_token)) args.push_back("--allow_plaintext_token");
  return args;
}

// The files of the security flags every shard and worker gets (SecurityArgs), which each reads
// at start: each must be readable.
absl::Status CheckSecurityFiles() {
  for (const bool is_server : {true, false}) {
    for (const std::string& arg : SecurityArgs(is_server)) {
      const std::vector<std::string> flag_file = absl::StrSplit(arg, absl::MaxSplits('=', 1));
      if (flag_file.size() != 2 || access(flag_file[1].c_str(), R_OK) == 0) continue;
      return absl::InvalidArgumentError(
          absl::StartsWith(flag_file[0], "--tls_")
              ? absl::StrCat("--tls_dir: cannot read ", flag_file[1],
                             " (scripts/make_test_certs.sh DIR makes the folder)")
              : absl::StrCat(flag_file[0], ": cannot read ", flag_file[1]));
    }
  }
  return absl::OkStatus();
}

// The /metrics flags of child `name` when --serve_metrics is on.
std::vector<std::string> MetricsArgs(const ClusterSpec& spec, const std::string& name) {
  if (!absl::GetFlag(FLAGS_serve_metrics)) return {};
  return {"--metrics_port=0", "--metrics_host=127.0.0.1",
          absl::StrCat("--metrics_port_file=", spec.RunFile(name + ".metrics_port"))};
}

// --python SCRIPT [ARGS]: the script, its arguments, and the package it imports. Stragglers,
// jitter and pauses reach a Python worker as PS_SLOWDOWN, PS_JITTER and PS_PAUSE (ps_train
// injects them as ps_worker does).
absl::Status ReadPythonWorker(const std::vector<std::string>& args, ClusterSpec* spec) {
  const int64_t python_batch = absl::GetFlag(FLAGS_python_batch);
  if (spec->python_script.empty()) {
    if (!args.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unexpected argument '", args[0], "' (only --python takes arguments: its script's)"));
    }
    if (python_batch != 0) {
      return absl::InvalidArgumentError(
          "--python_batch is a --python script's; ps_worker's is --batch_size x --accumulate");
    }
    return absl::OkStatus();
  }
  if (python_batch < 0) return absl::InvalidArgumentError("--python_batch must be >= 0");
  // What ps_worker checks as it starts (and --dry_run's worker 0 with it), a script's ps_train
  // checks only in ServerOptimizer(): checked here, so that a bad value exits 2 before anything
  // starts.
  DelayOptions delays;
  RETURN_IF_ERROR(ParseJitter("--jitter", absl::GetFlag(FLAGS_jitter), &delays));
  RETURN_IF_ERROR(ValidateDelayOptions(delays));
  for (int rank = 0; rank < spec->workers; ++rank) {
    RETURN_IF_ERROR(
        ParsePause(absl::StrCat("--pause_worker of rank ", rank), spec->pause[rank], &delays));
  }
  // The workload's and ps_worker's flags are not the script's: dropped silently, a --device or
  // an --epochs would look applied and not be.
  std::vector<std::string> dropped = ChangedFlagsOf("common/cli/workload_flags.cc");
  for (std::string& name : ChangedFlagsOf("worker/worker_flags.cc")) {
    if (name != "jitter") dropped.push_back(name);  // PS_JITTER
  }
  std::sort(dropped.begin(), dropped.end());
  if (!dropped.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", absl::StrJoin(dropped, ", --"),
        " set ps_worker's training; a --python worker trains as its script says: give the "
        "script its options after --"));
  }
  // Only the script knows its batch, which the launcher would otherwise take from --batch_size.
  if (absl::GetFlag(FLAGS_base_batch) > 0 && absl::GetFlag(FLAGS_effective_batch) == 0 &&
      python_batch == 0) {
    return absl::InvalidArgumentError(
        "--base_batch with --python needs --python_batch (the samples of one push, from which "
        "the launcher derives the samples behind one update) or --effective_batch (those "
        "samples themselves): only the script knows its batch");
  }
  if (access(spec->python_script.c_str(), R_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--python ", spec->python_script, ": no such readable file"));
  }
  spec->python_args = args;
  spec->python_path = std::filesystem::path(spec->bin_dir).parent_path().string() + "/python";
  if (access((spec->python_path + "/ps_train/__init__.py").c_str(), R_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--python: the ps_train package is not built in ", spec->python_path,
                     " (scripts/setup.sh installs pybind11-dev and python3-dev and builds it)"));
  }
  return absl::OkStatus();
}

void Append(std::vector<std::string>* to, const std::vector<std::string>& more) {
  to->insert(to->end(), more.begin(), more.end());
}

}  // namespace

absl::StatusOr<ClusterSpec> ClusterSpecFromFlags(const std::vector<std::string>& args) {
  ClusterSpec spec;
  spec.python_script = absl::GetFlag(FLAGS_python);
  spec.shards = absl::GetFlag(FLAGS_shards);
  spec.workers = absl::GetFlag(FLAGS_workers);
  if (spec.shards < 1 || spec.workers < 1) {
    return absl::InvalidArgumentError("--shards and --workers must be >= 1");
  }
  if (absl::GetFlag(FLAGS_num_workers) != 0) {
    return absl::InvalidArgumentError(
        "ps_launch takes the number of workers as --workers (it sets their --num_workers)");
  }
  RETURN_IF_ERROR(ParseWorkerFaults(&spec));
  RETURN_IF_ERROR(ChooseFolders(&spec));
  RETURN_IF_ERROR(ReadPythonWorker(args, &spec));
  RETURN_IF_ERROR(CheckSecurityFiles());
  spec.record_updates = absl::GetFlag(FLAGS_replayable);
  ASSIGN_OR_RETURN(spec.workload, WorkloadFromFlags());
  // Samples behind one update of a shard: under BSP the pushes a round averages (every worker's,
  // less the backup workers', whose round closes without the last ones), otherwise one worker's
  // push. The scaling rules scale the learning rate by it. A cosine schedule's end
  // (--decay_updates 0) is the shards' to find: the run's last update, from the work the workers
  // declare.
  ASSIGN_OR_RETURN(const ConsistencyMode mode, ParseConsistencyMode(absl::GetFlag(FLAGS_mode)));
  spec.bsp = mode == ConsistencyMode::kBsp;
  spec.per_push = spec.python_script.empty() || absl::GetFlag(FLAGS_python_batch) == 0
                      ? int64_t{spec.workload.batch_size} * spec.workload.accumulate
                      : absl::GetFlag(FLAGS_python_batch);
  // A backup count out of range is refused with the shards' options below.
  const int pushes_per_round = std::max(1, spec.workers - absl::GetFlag(FLAGS_backup_workers));
  spec.update_batch = spec.bsp ? spec.per_push * pushes_per_round : spec.per_push;
  if (absl::GetFlag(FLAGS_effective_batch) == 0) {
    absl::SetFlag(&FLAGS_effective_batch, spec.update_batch);
  }
  // The shards' flags (the optimizer's among them, with the effective batch just set), read and
  // checked as every shard will read them: a bad value exits 2 before anything starts, and
  // --dry_run finds it.
  ASSIGN_OR_RETURN(const ShardOptions shard, ShardOptionsFromFlags(0, spec.shards, spec.workers));
  spec.optimizer = shard.optimizer;
  // Work the job must do: a run cut short on purpose (--max_seconds), or with backup workers
  // (whose late pushes are left out by design), skips some by design.
  ASSIGN_OR_RETURN(spec.require_all_work,
                   RequireAllWorkFromFlags(spec.bsp && absl::GetFlag(FLAGS_max_seconds) == 0 &&
                                           absl::GetFlag(FLAGS_backup_workers) == 0));
  spec.optimizer_flags = ForwardedFlagsOf("common/cli/optimizer_flags.cc");
  spec.workload_flags = ForwardedFlagsOf("common/cli/workload_flags.cc");
  spec.shard_flags = ForwardedFlagsOf("server/server_flags.cc");
  spec.worker_flags = ForwardedFlagsOf("worker/worker_flags.cc");
  return spec;
}

std::string ShellLine(const std::vector<std::string>& command) {
  std::vector<std::string> words;
  for (const std::string& arg : command) {
    const bool plain = !arg.empty() && arg.find_first_not_of(
                                           "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                           "0123456789_-+=/.,:@%") == std::string::npos;
    words.push_back(plain ? arg : "'" + absl::StrReplaceAll(arg, {{"'", "'\\''"}}) + "'");
  }
  return absl::StrJoin(words, " ");
}

absl::Status CreateRunDir(const ClusterSpec& spec) {
  std::error_code ec;
  std::filesystem::create_directories(spec.run_dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create --metrics_dir ", spec.run_dir, ": ", ec.message()));
  }
  return absl::OkStatus();
}

std::string ShardCheckpointDir(int shard) {
  const std::string checkpoint_root = absl::GetFlag(FLAGS_checkpoint_root);
  return checkpoint_root.empty() ? "" : absl::StrCat(checkpoint_root, "/ps-", shard);
}

std::vector<std::string> ShardCommand(const ClusterSpec& spec, int shard,
                                      const std::string& port_file) {
  std::vector<std::string> args = {
      spec.bin_dir + "/ps_server",
      absl::StrCat("--shard_id=", shard),
      absl::StrCat("--num_shards=", spec.shards),
      absl::StrCat("--num_workers=", spec.workers),
      "--host=127.0.0.1",
      "--port=0",
      absl::StrCat("--port_file=", port_file),
      absl::StrCat("--record_updates=",
                   spec.record_updates ? spec.RunFile(absl::StrCat("ps-", shard, ".updates")) : ""),
      absl::StrCat("--checkpoint_dir=", ShardCheckpointDir(shard)),
      absl::StrCat("--shared_memory=", absl::GetFlag(FLAGS_shared_memory)),
      absl::StrCat("--local_calls=", absl::GetFlag(FLAGS_local_calls)),
      absl::StrCat("--log_level=", absl::GetFlag(FLAGS_log_level))};
  Append(&args, spec.shard_flags);
  Append(&args, spec.optimizer_flags);
  Append(&args, MetricsArgs(spec, absl::StrCat("ps-", shard)));
  Append(&args, SecurityArgs(/*is_server=*/true));
  return args;
}

namespace {

// What every ps_worker process of the job gets, training or evaluating.
std::vector<std::string> WorkerProcessArgs(const ClusterSpec& spec, const std::string& servers) {
  std::vector<std::string> args = {absl::StrCat("--servers=", servers),
                                   absl::StrCat("--log_level=", absl::GetFlag(FLAGS_log_level))};
  Append(&args, spec.workload_flags);
  Append(&args, SecurityArgs(/*is_server=*/false));
  return args;
}

}  // namespace

namespace {

// A Python worker: the interpreter under env(1), which sets what ps_train.torch reads.
std::vector<std::string> PythonWorkerCommand(const ClusterSpec& spec, int rank,
                                             const std::string& servers) {
  const char* inherited = std::getenv("PYTHONPATH");
  // One BLAS thread per worker, as ps_worker's CPU device, unless the caller chose: PyTorch's
  // set_num_threads does not bound OpenBLAS, whose idle threads spin on the cores the other
  // workers and the shards need (3 workers on 2 cores trained 1.4x faster with one).
  const char* blas_threads = std::getenv("OPENBLAS_NUM_THREADS");
  std::vector<std::string> args = {
      "/usr/bin/env",
      absl::StrCat("PS_SERVERS=", servers),
      absl::StrCat("PS_RANK=", rank),
      absl::StrCat("PS_NUM_WORKERS=", spec.workers),
      absl::StrCat("PS_SHARED_MEMORY=", absl::GetFlag(FLAGS_shared_memory) ? "true" : "false"),
      absl::StrCat("PS_LOCAL_CALLS=", absl::GetFlag(FLAGS_local_calls) ? "true" : "false"),
      absl::StrCat("PS_REQUIRE_ALL_WORK=", spec.require_all_work ? "true" : "false"),
      absl::StrCat("PS_JOB_REPORT=", spec.RunFile(kJobReportFile)),
      absl::StrCat("PS_METRICS_FILE=", spec.RunFile(absl::StrCat("worker-", rank, ".jsonl"))),
      absl::StrCat("PS_SLOWDOWN=", spec.slowdown[rank]),
      absl::StrCat("PS_PAUSE=", spec.pause[rank]),
      absl::StrCat("PS_JITTER=", absl::GetFlag(FLAGS_jitter)),
      absl::StrCat("OPENBLAS_NUM_THREADS=",
                   blas_threads != nullptr && *blas_threads != 0 ? blas_threads : "1"),
      absl::StrCat("PYTHONPATH=", spec.python_path,
                   inherited != nullptr && *inherited != 0 ? absl::StrCat(":", inherited) : "")};
  // The client's security flags as the variables of the same names (--tls_ca=F: PS_TLS_CA=F).
  for (const std::string& flag : SecurityArgs(/*is_server=*/false)) {
    const std::vector<std::string> name_value =
        absl::StrSplit(flag.substr(2), absl::MaxSplits('=', 1));
    args.push_back(absl::StrCat("PS_", absl::AsciiStrToUpper(name_value[0]), "=",
                                name_value.size() > 1 ? name_value[1] : "true"));
  }
  args.push_back(absl::GetFlag(FLAGS_python_bin));
  args.push_back("-u");  // unbuffered: the launcher streams the worker's lines as they come
  args.push_back(spec.python_script);
  Append(&args, spec.python_args);
  return args;
}

}  // namespace

std::vector<std::string> WorkerCommand(const ClusterSpec& spec, int rank,
                                       const std::string& servers) {
  if (!spec.python_script.empty()) return PythonWorkerCommand(spec, rank, servers);
  std::vector<std::string> args = {
      spec.bin_dir + "/ps_worker",
      absl::StrCat("--rank=", rank),
      absl::StrCat("--num_workers=", spec.workers),
      absl::StrCat("--slowdown=", spec.slowdown[rank]),
      absl::StrCat("--pause=", spec.pause[rank]),
      absl::StrCat("--shared_memory=", absl::GetFlag(FLAGS_shared_memory)),
      absl::StrCat("--local_calls=", absl::GetFlag(FLAGS_local_calls)),
      absl::StrCat("--metrics_file=", spec.RunFile(absl::StrCat("worker-", rank, ".jsonl")))};
  Append(&args, spec.worker_flags);
  Append(&args, WorkerProcessArgs(spec, servers));
  Append(&args, MetricsArgs(spec, absl::StrCat("worker-", rank)));
  return args;
}

std::vector<std::string> EvaluationCommand(const ClusterSpec& spec, const std::string& servers,
                                           const std::string& summary_out) {
  std::vector<std::string> args = {spec.bin_dir + "/ps_worker", "--evaluate",
                                   absl::StrCat("--summary_out=", summary_out)};
  Append(&args, WorkerProcessArgs(spec, servers));
  args.push_back(absl::StrCat("--require_all_work=", spec.require_all_work ? "true" : "false"));
  if (absl::GetFlag(FLAGS_save_weights)) {
    args.push_back(absl::StrCat("--weights_out=", spec.RunFile("weights.f32")));
  }
  return args;
}

}  // namespace ps
