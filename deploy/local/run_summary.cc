#include "deploy/local/run_summary.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/whole_file.h"
#include "common/data/data_registry.h"
#include "deploy/local/launch_flags.h"
#include "server/server_flags.h"
#include "worker/worker_flags.h"

ABSL_DECLARE_FLAG(double, lr);
ABSL_DECLARE_FLAG(int64_t, base_batch);
ABSL_DECLARE_FLAG(std::string, lr_scaling);

namespace ps {

namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Totals over the "step" lines of a worker's metrics file.
struct WorkerTotals {
  int64_t samples = 0;         // predictions: a language model's tokens
  std::vector<double> losses;  // each step's mean loss, in step order
  double step_ms = 0;          // whole steps, injected delays included
  double server_wait_ms = 0;   // of it, pulls held by the shards for consistency
  int64_t sparse_steps = 0;    // steps of a sparse model, and their distinct rows
  int64_t unique_keys = 0;
};

WorkerTotals TotalsOf(const std::string& path) {
  WorkerTotals t;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || j.value("kind", "") != "step") continue;
    t.samples += j.value("samples", int64_t{0});
    // ps_worker's lines always have a loss; a Python worker's when its step() was given one.
    if (j.contains("loss")) t.losses.push_back(j.value("loss", 0.0));
    t.step_ms += j.value("step_ms", 0.0);
    t.server_wait_ms += j.value("server_wait_ms", 0.0);
    if (j.contains("unique_keys")) {
      ++t.sparse_steps;
      t.unique_keys += j.value("unique_keys", int64_t{0});
    }
  }
  return t;
}

// What the workers' "step" lines (worker-R.jsonl) say over a run of `wall_s` seconds: samples
// and samples per second, the wait share (the part of each worker's step time its pulls spent
// held by the shards; and per worker), the mean unique keys per step of a sparse model, and the
// training loss at the end (the mean over the last tenth of each worker's steps) when the lines
// carry one.
nlohmann::json WorkersThroughput(const ClusterSpec& spec, double wall_s) {
  int64_t samples = 0, sparse_steps = 0, unique_keys = 0;
  double step_ms = 0, wait_ms = 0;
  double tail_loss = 0;
  int64_t tail_steps = 0;
  std::vector<double> wait_shares;
  for (int r = 0; r < spec.workers; ++r) {
    const WorkerTotals t = TotalsOf(spec.RunFile(absl::StrCat("worker-", r, ".jsonl")));
    samples += t.samples;
    step_ms += t.step_ms;
    wait_ms += t.server_wait_ms;
    sparse_steps += t.sparse_steps;
    unique_keys += t.unique_keys;
    const size_t tail = std::max<size_t>(1, t.losses.size() / 10);
    for (size_t i = t.losses.size() > tail ? t.losses.size() - tail : 0; i < t.losses.size(); ++i) {
      tail_loss += t.losses[i];
      ++tail_steps;
    }
    wait_shares.push_back(t.step_ms > 0 ? t.server_wait_ms / t.step_ms : 0.0);
  }
  nlohmann::json out = {{"samples", samples},
                        {"samples_per_sec", samples / wall_s},
                        {"wall_seconds", wall_s},
                        {"wait_share", step_ms > 0 ? wait_ms / step_ms : 0.0},
                        {"worker_wait_share", wait_shares}};
  if (sparse_steps > 0) {
    out["unique_keys_per_step"] = static_cast<double>(unique_keys) / sparse_steps;
  }
  if (tail_steps > 0) out["train_loss"] = tail_loss / tail_steps;
  return out;
}

// The slowness injected into the workers (ps_worker's or a Python worker's).
nlohmann::json InjectedDelays() {
  return {{"jitter", absl::GetFlag(FLAGS_jitter)},
          {"stragglers", absl::StrJoin(absl::GetFlag(FLAGS_straggler), ",")},
          {"pauses", absl::StrJoin(absl::GetFlag(FLAGS_pause_worker), ",")}};
}

// What the shards were given: the mode, the optimizer and its rate, the update rule, and what
// the workers were given to slow them down.
nlohmann::json ShardConfiguration(const ClusterSpec& spec) {
  const OptimizerOptions& o = spec.optimizer;
  // The rule that scaled the rate, `auto` resolved (the flag was checked when the spec was made).
  const LrScaling scaling = ResolveLrScaling(
      ParseLrScaling(absl::GetFlag(FLAGS_lr_scaling)).value_or(LrScaling::kAuto), o.kind);
  nlohmann::json configuration = {{"mode", absl::GetFlag(FLAGS_mode)},
                                  {"staleness", absl::GetFlag(FLAGS_staleness)},
                                  {"shards", spec.shards},
                                  {"workers", spec.workers},
                                  {"optimizer", OptimizerKindName(o.kind)},
                                  {"lr", absl::GetFlag(FLAGS_lr)},
                                  {"lr_effective", o.lr},
                                  {"base_batch", absl::GetFlag(FLAGS_base_batch)},
                                  {"lr_scaling", LrScalingName(scaling)},
                                  {"warmup_updates", o.warmup_updates},
                                  {"lr_schedule", LrScheduleName(o.schedule)},
                                  {"lr_step_updates", o.lr_step_updates},
                                  {"lr_step_gamma", o.lr_step_gamma},
                                  {"update_rule", absl::GetFlag(FLAGS_update_rule)},
                                  {"backup_workers", absl::GetFlag(FLAGS_backup_workers)}};
  configuration.update(InjectedDelays());
  return configuration;
}

// The samples behind one push of each worker (effective_batch: of all workers together) and
// behind one shard update.
nlohmann::json Batches(const ClusterSpec& spec) {
  return {{"effective_batch", spec.per_push * spec.workers}, {"update_batch", spec.update_batch}};
}

// A ps_worker run's configuration: the shards' and the workload's.
nlohmann::json Configuration(const ClusterSpec& spec) {
  nlohmann::json configuration = ShardConfiguration(spec);
  configuration.update(Batches(spec));
  configuration.update({{"data", DataSpecText(spec.workload.data)},
                        {"model", spec.workload.model.name},
                        {"epochs", spec.workload.epochs},
                        {"steps", spec.workload.steps},
                        {"batch_size", spec.workload.batch_size},
                        {"accumulate", spec.workload.accumulate},
                        {"device", absl::GetFlag(FLAGS_device)},
                        {"seed", spec.workload.seed}});
  return configuration;
}

// What the supervisor had to do: restarts of dead workers and shards, and rollbacks of every
// shard to one checkpoint.
nlohmann::json Restarts(const RunOutcome& outcome) {
  return {{"worker_restarts", outcome.worker_restarts},
          {"shard_restarts", outcome.shard_restarts},
          {"shard_rollbacks", outcome.shard_rollbacks}};
}

}  // namespace

absl::StatusOr<nlohmann::json> SummarizeRun(const ClusterSpec& spec, const RunOutcome& outcome,
                                            const std::string& eval_path) {
  const nlohmann::json eval = nlohmann::json::parse(ReadFile(eval_path), nullptr,
                                                    /*allow_exceptions=*/false);
  if (!eval.is_object() || !eval.contains("versions") || !eval["versions"].is_array()) {
    return absl::DataLossError(absl::StrCat(eval_path, " is malformed"));
  }
  const double wall_s = absl::ToDoubleSeconds(outcome.train_wall);
  // Updates per second of each shard, from the versions the final evaluation read.
  std::vector<double> shard_rates;
  for (const nlohmann::json& v : eval["versions"]) {
    shard_rates.push_back(v.is_number() ? v.get<double>() / wall_s : 0.0);
  }
  nlohmann::json summary = Configuration(spec);
  // The cosine schedule's end the shards used (the run's last update unless --decay_updates).
  summary["decay_updates"] = eval.value("decay_updates", int64_t{0});
  summary.update(WorkersThroughput(spec, wall_s));
  summary["shard_updates_per_sec"] = shard_rates;
  summary.update(Restarts(outcome));
  // A language model's predictions are its tokens.
  if (eval.contains("val_loss")) summary["tokens_per_sec"] = summary["samples_per_sec"];
  // eval.json's fields (test_accuracy, final_loss, staleness, the work account, ...) complete it.
  summary.update(eval);
  return summary;
}

absl::StatusOr<nlohmann::json> SummarizePythonRun(const ClusterSpec& spec,
                                                  const RunOutcome& outcome) {
  // The workload is the script's: its arguments, and its batch when --python_batch gave it.
  nlohmann::json summary = ShardConfiguration(spec);
  summary.update({{"python", spec.python_script}, {"python_args", spec.python_args}});
  summary.update(Restarts(outcome));
  const int64_t python_batch = absl::GetFlag(FLAGS_python_batch);
  if (python_batch > 0) {
    summary["python_batch"] = python_batch;
    summary.update(Batches(spec));
  }
  summary.update(WorkersThroughput(spec, absl::ToDoubleSeconds(outcome.train_wall)));
  const std::string report_path = spec.RunFile(kJobReportFile);
  if (!std::filesystem::exists(report_path)) {
    summary["job_report"] = absl::StrCat("no job report (", report_path,
                                         "): rank 0 did not call ps_train.torch.finish(), so "
                                         "there is no staleness or work account");
    return summary;
  }
  const nlohmann::json report = nlohmann::json::parse(ReadFile(report_path), nullptr,
                                                      /*allow_exceptions=*/false);
  if (!report.is_object()) return absl::DataLossError(absl::StrCat(report_path, " is malformed"));
  summary.update(report);
  return summary;
}

absl::Status WriteReplayCommand(const ClusterSpec& spec, int64_t decay_updates) {
  std::vector<std::string> records;
  for (int s = 0; s < spec.shards; ++s) {
    records.push_back(spec.RunFile(absl::StrCat("ps-", s, ".updates")));
  }
  std::vector<std::string> command = {spec.bin_dir + "/ps_replay",
                                      "--records=" + absl::StrJoin(records, ","),
                                      absl::StrCat("--num_workers=", spec.workers)};
  command.insert(command.end(), spec.workload_flags.begin(), spec.workload_flags.end());
  command.insert(command.end(), spec.optimizer_flags.begin(), spec.optimizer_flags.end());
  command.push_back(absl::StrCat("--decay_updates=", decay_updates));
  command.push_back("--weights_out=" + spec.RunFile("replayed.f32"));
  return WriteWholeFile(spec.RunFile("replay.cmd"), ShellLine(command) + "\n");
}

}  // namespace ps
