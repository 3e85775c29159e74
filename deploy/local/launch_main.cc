// ps_launch: a local cluster on loopback. Starts --shards ps_server processes and --workers
// ps_worker processes, streams their output with a name prefix, shows rank 0's progress line per
// epoch, evaluates the final weights once every worker has finished, and writes
// <metrics_dir>/summary.json. Exit code 0 only on success: not when work the job had to do was
// skipped (--require_all_work; the summary says what). On SIGINT, SIGTERM or any child's failure
// it stops every child. The optimizer's flags and --require_all_work are the binaries' own
// (common/optimizer_flags.cc, common/job_flags.cc), passed on by name.

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/cli.h"
#include "common/dataset.h"
#include "common/job_flags.h"
#include "common/json_lines.h"
#include "common/optimizer.h"
#include "common/optimizer_flags.h"
#include "common/shutdown_signal.h"
#include "common/workload_flags.h"
#include "deploy/local/child_processes.h"
#include "nlohmann/json.hpp"
#include "worker/worker_flags.h"

ABSL_DECLARE_FLAG(int64_t, effective_batch);
ABSL_DECLARE_FLAG(int64_t, base_batch);
ABSL_DECLARE_FLAG(double, lr);

ABSL_FLAG(int32_t, shards, 2, "Number of ps_server shards.");
ABSL_FLAG(int32_t, workers, 2, "Number of ps_worker processes.");
ABSL_FLAG(std::string, mode, "bsp", "Consistency mode: bsp, ssp or asp.");
ABSL_FLAG(int32_t, staleness, 0, "SSP staleness bound s.");
ABSL_FLAG(std::string, update_rule, "plain",
          "Stale gradients on the shards: plain, staleness_lr, dc_asgd or drop.");
ABSL_FLAG(double, dc_lambda, 0.04, "DC-ASGD's lambda.");
ABSL_FLAG(int64_t, drop_above, 4, "--update_rule drop: the largest staleness still applied.");
ABSL_FLAG(int32_t, backup_workers, 0, "BSP: rounds apply without this many slowest workers.");
ABSL_FLAG(std::vector<std::string>, straggler, {},
          "RANK:FACTOR makes every step of that worker take FACTOR times its normal time; "
          "repeatable, or comma-separated.");
ABSL_FLAG(std::vector<std::string>, pause, {},
          "RANK:STEP:SECONDS pauses that worker once after STEP; repeatable.");
ABSL_FLAG(std::string, metrics_dir, "",
          "Where summary.json and the per-worker JSON lines go (default runs/<time>).");
ABSL_FLAG(std::string, bin_dir, "",
          "Folder of ps_server and ps_worker (default: beside ps_launch).");
ABSL_FLAG(bool, record_updates, false,
          "Shards record the order they apply gradients in (<metrics_dir>/ps-N.updates), and "
          "<metrics_dir>/replay.cmd holds the ps_replay command that reproduces the run.");
ABSL_FLAG(bool, save_weights, false,
          "Also write the final weights as raw float32 to <metrics_dir>/weights.f32.");
ABSL_FLAG(int64_t, lease_ms, 10000, "Worker lease on the shards.");
ABSL_FLAG(bool, restart_workers, false,
          "Restart a worker that dies (after --restart_delay_s, at the same rank): it registers "
          "again and resumes from the clock the shards hold.");
ABSL_FLAG(bool, restart_shards, false,
          "Restart a shard that dies, on the same port; with --checkpoint_dir it restores its "
          "newest checkpoint.");
ABSL_FLAG(double, restart_delay_s, 2.0, "Seconds before a dead child is restarted.");
ABSL_FLAG(int32_t, max_restarts, 5, "Restarts allowed per child before the run fails.");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Shard checkpoints go to <dir>/ps-N (restored from there at start): see ps_server.");
ABSL_FLAG(int64_t, checkpoint_every, 0, "Shards checkpoint every this many updates (0: never).");
ABSL_FLAG(double, checkpoint_seconds, 0, "SSP/ASP: shards also checkpoint this often.");
ABSL_FLAG(std::string, tls_dir, "",
          "Mutual TLS: a folder made by scripts/make_test_certs.sh (ca.pem, server.pem/.key, "
          "client.pem/.key); the shards require client certificates.");
ABSL_FLAG(std::string, token_file, "",
          "Cluster token file for every call (needs --tls_dir, or --allow_plaintext_token).");
ABSL_FLAG(bool, allow_plaintext_token, false, "Allow --token_file without TLS.");
ABSL_FLAG(int32_t, fault_drop_push_reply_every, 0,
          "Fault injection: shards drop the reply of every Nth accepted push (0: off).");
ABSL_FLAG(bool, serve_metrics, false,
          "Every shard and worker serves Prometheus metrics on a free port, written to "
          "<metrics_dir>/<name>.metrics_port.");
ABSL_FLAG(double, hold_s, 0,
          "Keep the shards up this many seconds after the final evaluation (summary.json is "
          "written first), e.g. for a last scrape of their /metrics; Ctrl-C ends it early.");
ABSL_FLAG(bool, quiet, false, "Show only progress lines, warnings and errors of the children.");
ABSL_FLAG(std::string, log_level, "info", "Log level passed to the children.");

namespace {

using ps::ChildProcesses;

// ps_worker --evaluate's exit code when it wrote the result but required work was skipped.
constexpr int kExitWorkSkipped = 3;

std::string SelfDir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

// Waits for a server's --port_file. Returns 0 if the server died or the launcher was told to
// stop first.
int WaitForPort(ChildProcesses& children, int id, const std::string& path, int signal_fd,
                bool* interrupted) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    std::ifstream in(path);
    int port = 0;
    if (in >> port && port > 0) return port;
    if (!children.running(id)) return 0;
    if (children.Poll(absl::Milliseconds(20), signal_fd)) {
      *interrupted = true;
      return 0;
    }
  }
  return 0;
}

// Totals over the "step" lines of a worker's metrics file.
struct WorkerTotals {
  int64_t samples = 0;
  double step_ms = 0;         // whole steps, injected delays included
  double server_wait_ms = 0;  // pulls held by the shards for consistency
};

WorkerTotals TotalsOf(const std::string& path) {
  std::ifstream in(path);
  WorkerTotals t;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || j.value("kind", "") != "step") continue;
    t.samples += j.value("samples", int64_t{0});
    t.step_ms += j.value("step_ms", 0.0);
    t.server_wait_ms += j.value("server_wait_ms", 0.0);
  }
  return t;
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

// The /metrics flags of child `name` when --serve_metrics is on.
std::vector<std::string> MetricsArgs(const std::string& metrics_dir, const std::string& name) {
  if (!absl::GetFlag(FLAGS_serve_metrics)) return {};
  return {"--metrics_port=0", "--metrics_host=127.0.0.1",
          absl::StrCat("--metrics_port_file=", metrics_dir, "/", name, ".metrics_port")};
}

// A child the launcher keeps running: its current process, the command that (re)starts it, and
// when a pending restart is due.
struct Member {
  std::string name;
  std::vector<std::string> args;
  int id = -1;  // in ChildProcesses
  int restarts = 0;
  absl::Time restart_at = absl::InfiniteFuture();  // a restart is pending while finite
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> rest = ps::ParseCommandLine(
      argc, argv,
      "Runs a local parameter-server cluster on loopback and trains on Fashion-MNIST.\n"
      "  ps_launch --shards 2 --workers 2 --mode bsp --model mlp --epochs 5\n"
      "  ps_launch --workers 3 --mode ssp --staleness 2 --straggler 1:3");
  if (!rest.empty()) {
    std::fprintf(stderr, "ps_launch: unexpected argument '%s' (see --help)\n", rest[0].c_str());
    return 2;
  }
  const int shards = absl::GetFlag(FLAGS_shards);
  const int workers = absl::GetFlag(FLAGS_workers);
  if (shards < 1 || workers < 1) {
    std::fprintf(stderr, "ps_launch: --shards and --workers must be >= 1\n");
    return 2;
  }
  std::vector<double> slowdown(workers, 1.0);
  for (const std::string& s : absl::GetFlag(FLAGS_straggler)) {
    std::vector<std::string> parts = absl::StrSplit(s, ':');
    int rank = -1;
    double factor = 0.0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &rank) ||
        !absl::SimpleAtod(parts[1], &factor) || rank < 0 || rank >= workers || factor < 1.0) {
      std::fprintf(stderr,
                   "ps_launch: --straggler '%s' must be RANK:FACTOR with 0 <= RANK < %d and "
                   "FACTOR >= 1\n",
                   s.c_str(), workers);
      return 2;
    }
    slowdown[rank] = factor;
  }
  std::vector<std::string> pause(workers);
  for (const std::string& p : absl::GetFlag(FLAGS_pause)) {
    std::vector<std::string> parts = absl::StrSplit(p, absl::MaxSplits(':', 1));
    int rank = -1;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &rank) || rank < 0 || rank >= workers) {
      std::fprintf(stderr,
                   "ps_launch: --pause '%s' must be RANK:STEP:SECONDS with 0 <= RANK < %d\n",
                   p.c_str(), workers);
      return 2;
    }
    pause[rank] = parts[1];  // STEP:SECONDS, checked by the worker
  }
  std::string metrics_dir = absl::GetFlag(FLAGS_metrics_dir);
  if (metrics_dir.empty()) {
    metrics_dir = absl::StrCat(
        "runs/", absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::LocalTimeZone()));
  }
  std::error_code ec;
  std::filesystem::create_directories(metrics_dir, ec);
  if (ec) {
    std::fprintf(stderr, "ps_launch: cannot create --metrics_dir %s: %s\n", metrics_dir.c_str(),
                 ec.message().c_str());
    return 2;
  }
  const std::string bin_dir =
      absl::GetFlag(FLAGS_bin_dir).empty() ? SelfDir() : absl::GetFlag(FLAGS_bin_dir);
  const std::string server_bin = bin_dir + "/ps_server";
  const std::string worker_bin = bin_dir + "/ps_worker";
  for (const std::string& b : {server_bin, worker_bin}) {
    if (access(b.c_str(), X_OK) != 0) {
      std::fprintf(stderr, "ps_launch: %s is missing or not executable (see --bin_dir)\n",
                   b.c_str());
      return 2;
    }
  }

  // Samples behind one update of a shard: the whole global batch under BSP, one worker's push
  // otherwise. The linear scaling rule scales the learning rate by it. A cosine schedule's end
  // (--decay_updates 0) is the shards' to find: the run's last update, from the work the workers
  // declare.
  const absl::StatusOr<ps::Workload> workload = ps::WorkloadFromFlags();
  if (!workload.ok()) {
    std::fprintf(stderr, "ps_launch: %s\n", std::string(workload.status().message()).c_str());
    return 2;
  }
  const int64_t per_push = int64_t{workload->batch_size} * workload->accumulate;
  const int64_t update_batch = absl::GetFlag(FLAGS_mode) == "bsp" ? per_push * workers : per_push;
  if (absl::GetFlag(FLAGS_effective_batch) == 0)
    absl::SetFlag(&FLAGS_effective_batch, update_batch);
  const absl::StatusOr<ps::OptimizerOptions> optimizer = ps::OptimizerOptionsFromFlags();
  // Work the job must do: a run cut short on purpose (--max_seconds), or with backup workers
  // (whose late pushes are left out by design), skips some by design.
  const absl::StatusOr<bool> require_all_work = ps::RequireAllWorkFromFlags(
      absl::GetFlag(FLAGS_mode) == "bsp" && absl::GetFlag(FLAGS_max_seconds) == 0 &&
      absl::GetFlag(FLAGS_backup_workers) == 0);
  for (const absl::Status& s : {optimizer.status(), require_all_work.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "ps_launch: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  // Passed on to every shard (and to ps_replay) by name: each keeps the binaries' one default.
  const std::vector<std::string> optimizer_args = ps::ForwardedFlags(
      {"optimizer", "lr", "momentum", "beta1", "beta2", "epsilon", "weight_decay", "warmup_updates",
       "lr_schedule", "decay_updates", "base_batch", "effective_batch"});
  // What is trained, passed on to every worker (and to ps_replay) by name.
  const std::vector<std::string> workload_args = ps::ForwardedFlags(ps::WorkloadFlagNames());
  // The schedule, transport, device, evaluation, time budget and jitter of every worker.
  const std::vector<std::string> worker_args = ps::ForwardedFlags(ps::WorkerFlagNames());

  // Signals arrive on a descriptor polled with the children's output.
  ps::SignalPipe signals;
  const int signal_fd = signals.fd();

  const bool quiet = absl::GetFlag(FLAGS_quiet);
  ChildProcesses children([quiet](const std::string& name, const std::string& line) {
    // Rank 0's progress lines are for the user and shown plain.
    if (name == "worker-0" && absl::StartsWith(line, "epoch ")) {
      std::printf("%s\n", line.c_str());
    } else if (!quiet || absl::StrContains(line, " E ") || absl::StrContains(line, " W ") ||
               absl::StartsWith(line, "test_accuracy")) {
      const std::string prefix = "[" + name + "]";
      std::printf("%s\n",
                  absl::StartsWith(line, prefix) ? line.c_str() : (prefix + " " + line).c_str());
    }
    std::fflush(stdout);
  });

  const std::string common_log = absl::StrCat("--log_level=", absl::GetFlag(FLAGS_log_level));
  auto fail = [&](const std::string& why) {
    std::fprintf(stderr, "ps_launch: %s; stopping every process\n", why.c_str());
    children.StopAll();
    return 1;
  };
  auto interrupted_exit = [&]() {
    const int signo = signals.Read();
    std::fprintf(stderr, "ps_launch: signal %d; stopping every process\n", signo);
    children.StopAll();
    return 128 + signo;
  };

  // Starts (or restarts) a member and records its pid in <metrics_dir>/<name>.pid, where tests
  // and users find it.
  auto start = [&](Member& m) -> absl::Status {
    auto id = children.Start(m.name, m.args);
    if (!id.ok()) return id.status();
    m.id = *id;
    m.restart_at = absl::InfiniteFuture();
    std::ofstream(absl::StrCat(metrics_dir, "/", m.name, ".pid")) << children.pid(*id) << "\n";
    return absl::OkStatus();
  };

  // Servers first; their ports come back through --port_file.
  std::vector<Member> servers_members;
  std::vector<std::string> addresses;
  const std::string checkpoint_root = absl::GetFlag(FLAGS_checkpoint_dir);
  for (int s = 0; s < shards; ++s) {
    const std::string port_file = absl::StrCat(metrics_dir, "/ps-", s, ".port");
    std::filesystem::remove(port_file, ec);
    std::vector<std::string> args = {
        server_bin,
        absl::StrCat("--shard_id=", s),
        absl::StrCat("--num_shards=", shards),
        absl::StrCat("--num_workers=", workers),
        "--host=127.0.0.1",
        "--port=0",
        absl::StrCat("--port_file=", port_file),
        absl::StrCat("--mode=", absl::GetFlag(FLAGS_mode)),
        absl::StrCat("--staleness=", absl::GetFlag(FLAGS_staleness)),
        absl::StrCat("--update_rule=", absl::GetFlag(FLAGS_update_rule)),
        absl::StrCat("--dc_lambda=", absl::GetFlag(FLAGS_dc_lambda)),
        absl::StrCat("--drop_above=", absl::GetFlag(FLAGS_drop_above)),
        absl::StrCat("--backup_workers=", absl::GetFlag(FLAGS_backup_workers)),
        absl::StrCat("--lease_ms=", absl::GetFlag(FLAGS_lease_ms)),
        absl::StrCat("--record_updates=", absl::GetFlag(FLAGS_record_updates)
                                              ? absl::StrCat(metrics_dir, "/ps-", s, ".updates")
                                              : ""),
        absl::StrCat("--checkpoint_dir=",
                     checkpoint_root.empty() ? "" : absl::StrCat(checkpoint_root, "/ps-", s)),
        absl::StrCat("--checkpoint_every=", absl::GetFlag(FLAGS_checkpoint_every)),
        absl::StrCat("--checkpoint_seconds=", absl::GetFlag(FLAGS_checkpoint_seconds)),
        absl::StrCat("--fault_drop_push_reply_every=",
                     absl::GetFlag(FLAGS_fault_drop_push_reply_every)),
        absl::StrCat("--shared_memory=", absl::GetFlag(FLAGS_shared_memory)),
        common_log};
    args.insert(args.end(), optimizer_args.begin(), optimizer_args.end());
    const std::vector<std::string> metrics = MetricsArgs(metrics_dir, absl::StrCat("ps-", s));
    args.insert(args.end(), metrics.begin(), metrics.end());
    const std::vector<std::string> security = SecurityArgs(/*is_server=*/true);
    args.insert(args.end(), security.begin(), security.end());
    Member m{absl::StrCat("ps-", s), args};
    absl::Status started = start(m);
    if (!started.ok()) return fail(std::string(started.message()));
    bool interrupted = false;
    const int port = WaitForPort(children, m.id, port_file, signal_fd, &interrupted);
    if (interrupted) return interrupted_exit();
    if (port == 0) return fail(absl::StrCat("ps-", s, " did not start"));
    addresses.push_back(absl::StrCat("127.0.0.1:", port));
    // A restarted shard must come back where the workers look for it.
    for (std::string& a : m.args) {
      if (a == "--port=0") a = absl::StrCat("--port=", port);
    }
    servers_members.push_back(std::move(m));
  }
  const std::string servers = absl::StrJoin(addresses, ",");
  std::vector<std::string> model_args = {absl::StrCat("--servers=", servers), common_log};
  model_args.insert(model_args.end(), workload_args.begin(), workload_args.end());
  {
    const std::vector<std::string> security = SecurityArgs(/*is_server=*/false);
    model_args.insert(model_args.end(), security.begin(), security.end());
  }

  const absl::Time train_start = absl::Now();
  std::vector<Member> worker_members;
  for (int r = 0; r < workers; ++r) {
    // Workers append to their metrics file (a restarted one continues it): start it empty.
    std::filesystem::remove(absl::StrCat(metrics_dir, "/worker-", r, ".jsonl"), ec);
    std::vector<std::string> args = {
        worker_bin,
        absl::StrCat("--rank=", r),
        absl::StrCat("--num_workers=", workers),
        absl::StrCat("--slowdown=", slowdown[r]),
        absl::StrCat("--pause=", pause[r]),
        absl::StrCat("--metrics_file=", metrics_dir, "/worker-", r, ".jsonl")};
    args.insert(args.end(), worker_args.begin(), worker_args.end());
    args.insert(args.end(), model_args.begin(), model_args.end());
    const std::vector<std::string> metrics = MetricsArgs(metrics_dir, absl::StrCat("worker-", r));
    args.insert(args.end(), metrics.begin(), metrics.end());
    Member m{absl::StrCat("worker-", r), args};
    absl::Status started = start(m);
    if (!started.ok()) return fail(std::string(started.message()));
    worker_members.push_back(std::move(m));
  }

  // Train until every worker has exited. A child that dies is restarted when asked for (not
  // after exit code 2, a configuration error a restart cannot fix); any other failure stops the
  // cluster.
  const absl::Duration restart_delay = absl::Seconds(absl::GetFlag(FLAGS_restart_delay_s));
  const int max_restarts = absl::GetFlag(FLAGS_max_restarts);
  // Returns an error message when `m` failed for good; schedules or performs its restart.
  auto supervise = [&](Member& m, bool restartable, bool finished_ok) -> std::string {
    if (children.running(m.id) || finished_ok) return "";
    const int code = children.exit_code(m.id);
    if (!restartable || code == 2 || m.restarts >= max_restarts) {
      return absl::StrCat(m.name, " exited with code ", code,
                          restartable && code != 2 ? " (restarts used up)" : "");
    }
    if (m.restart_at == absl::InfiniteFuture()) {
      m.restart_at = absl::Now() + restart_delay;
      std::printf("ps_launch: %s exited with code %d; restarting it in %.1fs\n", m.name.c_str(),
                  code, absl::ToDoubleSeconds(restart_delay));
      std::fflush(stdout);
    } else if (absl::Now() >= m.restart_at) {
      ++m.restarts;
      absl::Status s = start(m);
      if (!s.ok()) return std::string(s.message());
    }
    return "";
  };
  for (;;) {
    if (children.Poll(absl::Milliseconds(100), signal_fd)) return interrupted_exit();
    for (Member& m : servers_members) {
      const std::string failed = supervise(m, absl::GetFlag(FLAGS_restart_shards), false);
      if (!failed.empty()) return fail(failed);
    }
    bool all_done = true;
    for (Member& m : worker_members) {
      const bool ok = !children.running(m.id) && children.exit_code(m.id) == 0;
      const std::string failed = supervise(m, absl::GetFlag(FLAGS_restart_workers), ok);
      if (!failed.empty()) return fail(failed);
      all_done = all_done && ok;
    }
    if (all_done) break;
  }
  const absl::Duration train_wall = absl::Now() - train_start;

  // The final weights, measured once every worker has finished.
  const std::string eval_path = metrics_dir + "/eval.json";
  std::vector<std::string> eval_args = {worker_bin, "--evaluate",
                                        absl::StrCat("--summary_out=", eval_path)};
  eval_args.insert(eval_args.end(), model_args.begin(), model_args.end());
  eval_args.push_back(absl::StrCat("--require_all_work=", *require_all_work ? "true" : "false"));
  if (absl::GetFlag(FLAGS_save_weights)) {
    eval_args.push_back(absl::StrCat("--weights_out=", metrics_dir, "/weights.f32"));
  }
  auto eval_id = children.Start("eval", eval_args);
  if (!eval_id.ok()) return fail(std::string(eval_id.status().message()));
  while (children.running(*eval_id)) {
    if (children.Poll(absl::Milliseconds(200), signal_fd)) return interrupted_exit();
  }
  // Exit code 3: the result is in eval.json, but work the job had to do was skipped; the summary
  // is written all the same, and the launch fails after it.
  const int eval_code = children.exit_code(*eval_id);
  if (eval_code != 0 && eval_code != kExitWorkSkipped) {
    return fail("the final evaluation failed");
  }
  // The summary is written before the shards stop; --hold_s keeps them up after it.
  auto stop_servers = [&]() -> int {
    children.StopAll();
    for (const Member& m : servers_members) {
      if (children.exit_code(m.id) != 0) {
        std::fprintf(stderr, "ps_launch: %s exited with code %d at shutdown\n", m.name.c_str(),
                     children.exit_code(m.id));
        return 1;
      }
    }
    return 0;
  };
  int worker_restarts = 0, shard_restarts = 0;
  for (const Member& m : worker_members) worker_restarts += m.restarts;
  for (const Member& m : servers_members) shard_restarts += m.restarts;

  // Wait share: the part of each worker's step time its pulls spent held by the shards.
  int64_t samples = 0;
  double step_ms = 0, wait_ms = 0;
  std::vector<double> wait_shares;
  for (int r = 0; r < workers; ++r) {
    const WorkerTotals t = TotalsOf(absl::StrCat(metrics_dir, "/worker-", r, ".jsonl"));
    samples += t.samples;
    step_ms += t.step_ms;
    wait_ms += t.server_wait_ms;
    wait_shares.push_back(t.step_ms > 0 ? t.server_wait_ms / t.step_ms : 0.0);
  }
  const double wall_s = absl::ToDoubleSeconds(train_wall);
  const nlohmann::json eval = nlohmann::json::parse(ReadFile(eval_path), nullptr,
                                                    /*allow_exceptions=*/false);
  if (!eval.is_object() || !eval.contains("versions") || !eval["versions"].is_array()) {
    return fail("eval.json is malformed");
  }
  // Updates per second of each shard, from the versions the final evaluation read.
  std::vector<double> shard_rates;
  for (const nlohmann::json& v : eval["versions"]) {
    shard_rates.push_back(v.is_number() ? v.get<double>() / wall_s : 0.0);
  }
  // The cosine schedule's end the shards used (the run's last update unless --decay_updates).
  const int64_t decay_updates = eval.value("decay_updates", int64_t{0});
  nlohmann::json summary = {
      {"mode", absl::GetFlag(FLAGS_mode)},
      {"staleness", absl::GetFlag(FLAGS_staleness)},
      {"shards", shards},
      {"workers", workers},
      {"data", ps::DataSpecText(workload->data)},
      {"model", workload->model.name},
      {"epochs", workload->epochs},
      {"batch_size", workload->batch_size},
      {"accumulate", workload->accumulate},
      {"effective_batch", per_push * workers},
      {"device", absl::GetFlag(FLAGS_device)},
      {"optimizer", ps::OptimizerKindName(optimizer->kind)},
      {"lr", absl::GetFlag(FLAGS_lr)},
      {"lr_effective", optimizer->lr},
      {"base_batch", absl::GetFlag(FLAGS_base_batch)},
      {"update_batch", update_batch},
      {"warmup_updates", optimizer->warmup_updates},
      {"lr_schedule", optimizer->schedule == ps::LrSchedule::kCosine ? "cosine" : "constant"},
      {"decay_updates", decay_updates},
      {"seed", workload->seed},
      {"samples", samples},
      {"samples_per_sec", samples / wall_s},
      {"wall_seconds", wall_s},
      {"wait_share", step_ms > 0 ? wait_ms / step_ms : 0.0},
      {"worker_wait_share", wait_shares},
      {"shard_updates_per_sec", shard_rates},
      {"update_rule", absl::GetFlag(FLAGS_update_rule)},
      {"backup_workers", absl::GetFlag(FLAGS_backup_workers)},
      {"jitter", absl::GetFlag(FLAGS_jitter)},
      {"stragglers", absl::StrJoin(absl::GetFlag(FLAGS_straggler), ",")},
      {"worker_restarts", worker_restarts},
      {"shard_restarts", shard_restarts}};
  // eval.json's fields (test_accuracy, final_loss, staleness, the work account, ...) complete it.
  summary.update(eval);
  if (absl::GetFlag(FLAGS_record_updates)) {
    std::vector<std::string> records;
    for (int s = 0; s < shards; ++s)
      records.push_back(absl::StrCat(metrics_dir, "/ps-", s, ".updates"));
    std::ofstream cmd(metrics_dir + "/replay.cmd");
    cmd << bin_dir << "/ps_replay --records=" << absl::StrJoin(records, ",")
        << " --num_workers=" << workers << " " << absl::StrJoin(workload_args, " ") << " "
        << absl::StrJoin(optimizer_args, " ") << " --decay_updates=" << decay_updates
        << " --weights_out=" << metrics_dir << "/replayed.f32\n";
  }
  const std::string summary_path = metrics_dir + "/summary.json";
  std::ofstream out(summary_path);
  out << summary.dump() << "\n";
  out.close();
  if (!out) return fail("cannot write " + summary_path);
  if (eval_code == kExitWorkSkipped) {
    return fail(absl::StrCat(
        summary.value("samples_skipped", int64_t{0}),
        " samples were never trained and all work was required (--require_all_work); what was "
        "skipped is in ",
        summary_path));
  }
  if (absl::GetFlag(FLAGS_hold_s) > 0) {
    std::printf("ps_launch: summary written; holding the shards for %.0fs\n",
                absl::GetFlag(FLAGS_hold_s));
    std::fflush(stdout);
    const absl::Time until = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_hold_s));
    while (absl::Now() < until) {
      if (children.Poll(absl::Milliseconds(100), signal_fd)) {
        signals.Read();
        break;
      }
    }
  }
  if (stop_servers() != 0) return 1;
  std::printf("done: %lld samples in %.1fs (%.0f samples/s); summary in %s\n",
              static_cast<long long>(samples), wall_s, samples / wall_s, summary_path.c_str());
  return 0;
}
