// ps_launch: a local cluster on loopback. Starts --shards ps_server processes and --workers
// ps_worker processes, streams their output with a name prefix, shows rank 0's progress line per
// epoch, evaluates the final weights once every worker has finished, and writes
// <metrics_dir>/summary.json. Exit code 0 only on success: not when work the job had to do was
// skipped (--require_all_work; the summary says what). On SIGINT, SIGTERM or any child's failure
// it stops every child. The binaries' flags (the shards', the workers', the workload's, the
// optimizer's) are defined once, by them, and passed on by name (cluster_spec.h). With
// --python SCRIPT [-- ARGS] each worker is that script (ps_train.torch, docs/python.md) and the
// run ends when the scripts have.

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/base/whole_file.h"
#include "common/cli/cli.h"
#include "common/storage/checkpoint.h"
#include "deploy/local/cluster_spec.h"
#include "deploy/local/launch_flags.h"
#include "deploy/local/run_summary.h"
#include "deploy/local/supervisor.h"
#include "server/server_flags.h"

ABSL_FLAG(bool, restart_workers, false,
          "Restart a worker that dies (after --restart_delay_s, at the same rank): it registers "
          "again and resumes from the clock the shards hold.");
ABSL_FLAG(bool, restart_shards, false,
          "Restart a shard that dies, on the same port; with --checkpoint_root it restores its "
          "newest checkpoint.");
ABSL_FLAG(bool, rollback_shards, false,
          "BSP, with --restart_shards and --checkpoint_every: when a shard dies, stop the others "
          "too and restart every shard at the newest checkpoint all of them hold intact (the same "
          "cut), so the rounds lost are redone exactly as the first time and the run ends with "
          "the undisturbed run's weights. Without it the dead shard alone restores its newest "
          "checkpoint, and the rounds it redoes see the other shards' newer weights.");
ABSL_FLAG(double, restart_delay_s, 2.0, "Seconds before a dead child is restarted.");
ABSL_FLAG(int32_t, max_restarts, 5, "Restarts allowed per child before the run fails.");
ABSL_FLAG(double, hold_s, 0,
          "Keep the shards up this many seconds after the final evaluation (summary.json is "
          "written first), e.g. for a last scrape of their /metrics; Ctrl-C ends it early.");
ABSL_FLAG(bool, quiet, false, "Show only progress lines, warnings and errors of the children.");
ABSL_FLAG(bool, dry_run, false,
          "Check the flags (the launcher's, the workload's, the optimizer's and the shards', as "
          "every shard reads them), print the command line of every process the run would "
          "start, have worker 0 check its flags and data (ps_worker --check_only), and exit 0, "
          "or 2 on a bad flag; starts no shard or worker and writes nothing.");

namespace {

using ps::Supervisor;

// ps_worker --evaluate's exit code when it wrote the result but required work was skipped.
constexpr int kExitWorkSkipped = 3;

// Ends the run: every child stopped; 128 + the signal after one, 2 after a child's configuration
// error (INVALID_ARGUMENT, see ps::RefusedConfiguration), 1 after any other failure.
int Stop(Supervisor& supervisor, const absl::Status& why) {
  if (absl::IsCancelled(why)) {
    const int signo = supervisor.TakeSignal();
    std::fprintf(stderr, "ps_launch: signal %d; stopping every process\n", signo);
    supervisor.StopAll();
    return 128 + signo;
  }
  std::fprintf(stderr, "ps_launch: %s; stopping every process\n",
               std::string(why.message()).c_str());
  supervisor.StopAll();
  return absl::IsInvalidArgument(why) ? ps::kExitConfigurationError : 1;
}

// Starts the shards, one after another; their ports come back through --port_file, and a
// restarted shard comes back on its port, where the workers look for it.
absl::Status StartShards(const ps::ClusterSpec& spec, Supervisor& supervisor,
                         std::vector<Supervisor::Member>* shards, std::string* addresses) {
  std::vector<std::string> each;
  for (int s = 0; s < spec.shards; ++s) {
    const std::string port_file = spec.RunFile(absl::StrCat("ps-", s, ".port"));
    std::error_code ec;
    std::filesystem::remove(port_file, ec);
    Supervisor::Member m{absl::StrCat("ps-", s), ps::ShardCommand(spec, s, port_file)};
    if (absl::Status started = supervisor.Start(m); !started.ok()) return started;
    absl::StatusOr<int> port = supervisor.WaitForPort(m, port_file);
    if (!port.ok()) return port.status();
    if (*port == 0) {
      if (supervisor.exit_code(m) == ps::kExitConfigurationError) {
        return ps::RefusedConfiguration(m.name);
      }
      return absl::UnavailableError(absl::StrCat("ps-", s, " did not start"));
    }
    each.push_back(absl::StrCat("127.0.0.1:", *port));
    for (std::string& a : m.command) {
      if (a == "--port=0") a = absl::StrCat("--port=", *port);
    }
    shards->push_back(std::move(m));
  }
  *addresses = absl::StrJoin(each, ",");
  return absl::OkStatus();
}

absl::Status StartWorkers(const ps::ClusterSpec& spec, const std::string& addresses,
                          Supervisor& supervisor, std::vector<Supervisor::Member>* workers) {
  for (int r = 0; r < spec.workers; ++r) {
    // Workers append to their metrics file (a restarted one continues it): start it empty.
    std::error_code ec;
    std::filesystem::remove(spec.RunFile(absl::StrCat("worker-", r, ".jsonl")), ec);
    Supervisor::Member m{absl::StrCat("worker-", r), ps::WorkerCommand(spec, r, addresses)};
    if (absl::Status started = supervisor.Start(m); !started.ok()) return started;
    workers->push_back(std::move(m));
  }
  return absl::OkStatus();
}

int Restarts(const std::vector<Supervisor::Member>& members) {
  int total = 0;
  for (const Supervisor::Member& m : members) total += m.restarts;
  return total;
}

// The shards' exit codes once stopped: 1 if one failed at shutdown.
int StopShards(Supervisor& supervisor, const std::vector<Supervisor::Member>& shards) {
  supervisor.StopAll();
  for (const Supervisor::Member& m : shards) {
    if (supervisor.exit_code(m) != 0) {
      std::fprintf(stderr, "ps_launch: %s exited with code %d at shutdown\n", m.name.c_str(),
                   supervisor.exit_code(m));
      return 1;
    }
  }
  return 0;
}

// A --python run ends when its workers have: each script evaluated its own model, and rank 0's
// ps_train.torch.finish() failed the job if work it had to do was skipped.
int FinishPythonRun(const ps::ClusterSpec& spec, const ps::RunOutcome& outcome,
                    Supervisor& supervisor, const std::vector<Supervisor::Member>& shards) {
  absl::StatusOr<nlohmann::json> summary = ps::SummarizePythonRun(spec, outcome);
  if (!summary.ok()) return Stop(supervisor, summary.status());
  if (summary->contains("job_report")) {
    std::fprintf(stderr, "ps_launch: %s\n", summary->value("job_report", "").c_str());
  }
  const std::string summary_path = spec.RunFile("summary.json");
  const absl::Status written = ps::WriteWholeFile(summary_path, summary->dump() + "\n");
  if (!written.ok()) return Stop(supervisor, written);
  if (StopShards(supervisor, shards) != 0) return 1;
  std::printf("done: %d Python workers in %.1fs; summary in %s\n", spec.workers,
              absl::ToDoubleSeconds(outcome.train_wall), summary_path.c_str());
  return 0;
}

// --dry_run: the processes a run would start, one command line each, in start order, on stdout.
// The shards' ports are only known once they run, so the workers' --servers name them <ps-N>.
// Worker 0 then checks its flags and data (ps_worker --check_only; the workers differ only in
// rank and injected delays, which the launcher checked), its lines on stderr. Exit code 0, 2 when
// the worker refused, 128 + the signal that stopped it.
int DryRun(const ps::ClusterSpec& spec) {
  std::vector<std::string> addresses;
  for (int s = 0; s < spec.shards; ++s) addresses.push_back(absl::StrCat("<ps-", s, ">"));
  const std::string servers = absl::StrJoin(addresses, ",");
  std::vector<std::vector<std::string>> commands;
  for (int s = 0; s < spec.shards; ++s) {
    commands.push_back(ps::ShardCommand(spec, s, spec.RunFile(absl::StrCat("ps-", s, ".port"))));
  }
  for (int r = 0; r < spec.workers; ++r) commands.push_back(ps::WorkerCommand(spec, r, servers));
  if (spec.python_script.empty()) {
    commands.push_back(ps::EvaluationCommand(spec, servers, spec.RunFile("eval.json")));
  }
  for (const std::vector<std::string>& command : commands) {
    std::printf("%s\n", ps::ShellLine(command).c_str());
  }
  std::fflush(stdout);
  if (!spec.python_script.empty()) return 0;
  std::vector<std::string> check = ps::WorkerCommand(spec, 0, servers);
  check.push_back("--check_only");
  ps::SupervisorOptions options;
  options.run_dir = spec.run_dir;
  options.output = stderr;  // stdout holds the commands only
  Supervisor supervisor(options);
  absl::StatusOr<int> code = supervisor.RunToEnd("worker-0", check);
  if (!code.ok()) return Stop(supervisor, code.status());
  if (*code == 0) return 0;
  return Stop(supervisor, *code == ps::kExitConfigurationError
                              ? ps::RefusedConfiguration("worker-0")
                              : absl::InternalError(absl::StrCat(
                                    "worker-0 --check_only exited with code ", *code)));
}

// The launcher's own restart flags. A shard restarted without a checkpoint to restore holds no
// parameters: the workers would give it their copy and redo the whole job from step 0 (see
// docs/NOTES.md), which is not what --restart_shards promises, so it needs --checkpoint_root.
absl::Status CheckRestartFlags() {
  if (absl::GetFlag(FLAGS_max_restarts) < 0 || !(absl::GetFlag(FLAGS_restart_delay_s) >= 0)) {
    return absl::InvalidArgumentError("--max_restarts and --restart_delay_s must be >= 0");
  }
  if (absl::GetFlag(FLAGS_restart_shards) && absl::GetFlag(FLAGS_checkpoint_root).empty()) {
    return absl::InvalidArgumentError(
        "--restart_shards restarts a shard from its newest checkpoint: give --checkpoint_root "
        "DIR, and --checkpoint_every N or --checkpoint_seconds T for a shard that crashes (one "
        "stopped by SIGTERM writes a final checkpoint)");
  }
  if (absl::GetFlag(FLAGS_rollback_shards) &&
      (!absl::GetFlag(FLAGS_restart_shards) || absl::GetFlag(FLAGS_mode) != "bsp" ||
       absl::GetFlag(FLAGS_checkpoint_every) <= 0)) {
    return absl::InvalidArgumentError(
        "--rollback_shards puts every shard back to one BSP cut: it needs --restart_shards, "
        "--mode bsp and --checkpoint_every N (under SSP and ASP the shards checkpoint at "
        "versions of their own)");
  }
  return absl::OkStatus();
}

// --rollback_shards: the newest checkpoint version every shard can restore; by the listing while
// some shards run (their writers' files left alone), their files read once all are stopped.
std::optional<int64_t> CommonCheckpointVersion(const ps::ClusterSpec& spec, bool stopped) {
  std::vector<ps::CheckpointDir> dirs;
  for (int s = 0; s < spec.shards; ++s) {
    dirs.push_back(ps::CheckpointDir::ForReading(ps::ShardCheckpointDir(s)));
  }
  const std::optional<uint64_t> version = ps::NewestCommonRestorable(
      dirs, stopped ? ps::RestorableCheck::kIntact : ps::RestorableCheck::kListed);
  if (!version.has_value()) return std::nullopt;
  return static_cast<int64_t>(*version);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args = ps::ParseCommandLine(
      argc, argv,
      "Runs a local parameter-server cluster on loopback and trains on Fashion-MNIST.\n"
      "  ps_launch --shards 2 --workers 2 --mode bsp --model mlp --epochs 5\n"
      "  ps_launch --workers 3 --mode ssp --staleness 2 --straggler 1:3\n"
      "  ps_launch --workers 2 --optimizer sgd --lr 0.05 --python examples/fashion_mnist_mlp.py -- "
      "--epochs 2");
  const absl::StatusOr<ps::ClusterSpec> spec = ps::ClusterSpecFromFlags(args);
  if (absl::Status s = spec.ok() ? CheckRestartFlags() : spec.status(); !s.ok()) {
    std::fprintf(stderr, "ps_launch: %s\n", std::string(s.message()).c_str());
    return ps::kExitConfigurationError;
  }
  if (absl::GetFlag(FLAGS_dry_run)) return DryRun(*spec);
  if (absl::Status s = ps::CreateRunDir(*spec); !s.ok()) {
    std::fprintf(stderr, "ps_launch: %s\n", std::string(s.message()).c_str());
    return ps::kExitConfigurationError;
  }
  Supervisor supervisor(ps::SupervisorOptions{spec->run_dir, absl::GetFlag(FLAGS_quiet),
                                              absl::Seconds(absl::GetFlag(FLAGS_restart_delay_s)),
                                              absl::GetFlag(FLAGS_max_restarts)});
  std::vector<Supervisor::Member> shards, workers;
  std::string addresses;
  if (absl::Status s = StartShards(*spec, supervisor, &shards, &addresses); !s.ok()) {
    return Stop(supervisor, s);
  }
  const absl::Time train_start = absl::Now();
  if (absl::Status s = StartWorkers(*spec, addresses, supervisor, &workers); !s.ok()) {
    return Stop(supervisor, s);
  }
  Supervisor::RollbackVersion rollback;
  if (absl::GetFlag(FLAGS_rollback_shards)) {
    rollback = [&spec](bool stopped) { return CommonCheckpointVersion(*spec, stopped); };
  }
  if (absl::Status s =
          supervisor.RunUntilWorkersFinish(shards, absl::GetFlag(FLAGS_restart_shards), workers,
                                           absl::GetFlag(FLAGS_restart_workers), rollback);
      !s.ok()) {
    return Stop(supervisor, s);
  }
  const ps::RunOutcome outcome{absl::Now() - train_start, Restarts(workers), Restarts(shards),
                               supervisor.rollbacks()};
  if (!spec->python_script.empty()) return FinishPythonRun(*spec, outcome, supervisor, shards);

  // The final weights, measured once every worker has finished. Exit code 3: the result is in
  // eval.json, but work the job had to do was skipped; the summary is written all the same, and
  // the launch fails after it.
  const std::string eval_path = spec->RunFile("eval.json");
  absl::StatusOr<int> eval_code =
      supervisor.RunToEnd("eval", ps::EvaluationCommand(*spec, addresses, eval_path));
  if (!eval_code.ok()) return Stop(supervisor, eval_code.status());
  if (*eval_code == ps::kExitConfigurationError) {
    return Stop(supervisor, ps::RefusedConfiguration("eval"));
  }
  if (*eval_code != 0 && *eval_code != kExitWorkSkipped) {
    return Stop(supervisor, absl::InternalError("the final evaluation failed"));
  }
  absl::StatusOr<nlohmann::json> summary = ps::SummarizeRun(*spec, outcome, eval_path);
  if (!summary.ok()) return Stop(supervisor, summary.status());
  if (spec->record_updates) {
    absl::Status s = ps::WriteReplayCommand(*spec, summary->value("decay_updates", int64_t{0}));
    if (!s.ok()) return Stop(supervisor, s);
  }
  const std::string summary_path = spec->RunFile("summary.json");
  const absl::Status written = ps::WriteWholeFile(summary_path, summary->dump() + "\n");
  if (!written.ok()) return Stop(supervisor, written);
  if (*eval_code == kExitWorkSkipped) {
    return Stop(supervisor, absl::DataLossError(absl::StrCat(
                                summary->value("samples_skipped", int64_t{0}),
                                " samples were never trained and all work was required "
                                "(--require_all_work); what was skipped is in ",
                                summary_path)));
  }
  if (absl::GetFlag(FLAGS_hold_s) > 0) {
    std::printf("ps_launch: summary written; holding the shards for %.0fs\n",
                absl::GetFlag(FLAGS_hold_s));
    std::fflush(stdout);
    supervisor.Hold(absl::Seconds(absl::GetFlag(FLAGS_hold_s)));
  }
  if (StopShards(supervisor, shards) != 0) return 1;
  const int64_t samples = summary->value("samples", int64_t{0});
  const double wall_s = absl::ToDoubleSeconds(outcome.train_wall);
  std::printf("done: %lld samples in %.1fs (%.0f samples/s); summary in %s\n",
              static_cast<long long>(samples), wall_s, samples / wall_s, summary_path.c_str());
  return 0;
}
