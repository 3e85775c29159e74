// ps_worker: one data-parallel worker (or, with --evaluate, an observer that measures the
// servers' current weights on the test set). Parses flags, then runs the Trainer until done or
// until SIGINT/SIGTERM (exit 143 then: an interrupted worker has not finished its work).

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cli.h"
#include "common/dataset.h"
#include "common/job_flags.h"
#include "common/json_lines.h"
#include "common/logging.h"
#include "common/malloc_tuning.h"
#include "common/model.h"
#include "common/prometheus.h"
#include "common/security_flags.h"
#include "common/shutdown_signal.h"
#include "common/tensor_codec.h"
#include "common/workload_flags.h"
#include "spdlog/spdlog.h"
#include "worker/device_select.h"
#include "worker/grpc_parameter_client.h"
#include "worker/trainer.h"
#include "worker/work_account.h"

ABSL_FLAG(int32_t, rank, -1,
          "This worker's rank in [0, num_workers); -1: $JOB_COMPLETION_INDEX (an Indexed Job's "
          "pod), else 0.");
ABSL_FLAG(int32_t, num_workers, 0,
          "Workers in the job; checked against the servers' --num_workers (0: take theirs).");
ABSL_FLAG(std::string, servers, "127.0.0.1:5000",
          "Comma-separated host:port of shard 0, 1, ... in shard order.");
ABSL_FLAG(std::string, metrics_file, "", "Append per-step metrics as JSON lines to this file.");
ABSL_FLAG(std::string, jitter, "",
          "PROBABILITY:FACTOR: each step, with that probability, takes FACTOR times the normal "
          "step time (seeded by --seed, rank and step).");
ABSL_FLAG(std::string, pause, "", "STEP:SECONDS: pause that long once, after computing STEP.");
ABSL_FLAG(double, slowdown, 1.0,
          "Straggler factor >= 1: every step takes this many times the normal step time.");
ABSL_FLAG(bool, eval_each_epoch, true, "Rank 0 measures test accuracy at each epoch end.");
ABSL_FLAG(int64_t, eval_every, 0,
          "Rank 0 also measures test accuracy every this many steps (0: only at epoch ends).");
ABSL_FLAG(bool, evaluate, false,
          "Observer mode: read the current weights, evaluate the test set, write --summary_out.");
ABSL_FLAG(std::string, summary_out, "", "--evaluate: write the result as one JSON object here.");
ABSL_FLAG(std::string, weights_out, "", "--evaluate: write the weights as raw float32 here.");
ABSL_FLAG(int32_t, wait_for_job_s, 0,
          "--evaluate: first wait up to this many seconds until no worker can add to the result "
          "(each has pushed all its steps or is gone); 0: evaluate at once.");
ABSL_FLAG(std::string, device, "cpu", "Compute device: cpu, cuda or cuda:N.");
ABSL_FLAG(int32_t, register_timeout_s, 60, "Seconds to wait for the servers to come up.");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn or error.");
ABSL_FLAG(int32_t, call_timeout_s, 30, "Deadline of a Register, Init, Push or status call.");
ABSL_FLAG(int32_t, pull_timeout_s, 600, "Deadline of a pull (it may wait for slow workers).");
ABSL_FLAG(int32_t, retry_s, 0,
          "Keep retrying UNAVAILABLE answers (a shard restarting) this many seconds; 0: until "
          "the shard is back (the launcher or orchestrator ends a job whose shard is gone).");
ABSL_FLAG(int32_t, max_message_mb, 256, "Largest gRPC message sent or accepted, in MiB.");
ABSL_FLAG(int32_t, metrics_port, -1,
          "Serve Prometheus metrics at http://<--metrics_host>:PORT/metrics (0: a free port, "
          "see --metrics_port_file; -1: off).");
ABSL_FLAG(std::string, metrics_host, "0.0.0.0", "Address of the /metrics endpoint.");
ABSL_FLAG(std::string, metrics_port_file, "", "Write the /metrics port to this file.");
ABSL_FLAG(double, max_seconds, 0,
          "Stop training successfully after this many seconds (0: run every epoch).");
ABSL_FLAG(std::string, push_encoding, "f32",
          "How gradients travel: f32, bf16, fp16, or topk (top-k sparsification with error "
          "feedback, keeping --topk_ratio of each shard's elements per step).");
ABSL_FLAG(double, topk_ratio, 0.01, "--push_encoding topk: share of elements sent per step.");
ABSL_FLAG(std::string, pull_encoding, "f32", "How weights travel: f32, bf16 or fp16.");
ABSL_FLAG(bool, overlap, false,
          "SSP/ASP: pull the next step's weights while this step computes and pushes (hides "
          "communication; adds up to one update of staleness). Ignored under BSP.");
ABSL_FLAG(bool, async_push, false,
          "SSP/ASP: push each step's gradient on another thread while the next step pulls and "
          "computes (adds up to one update of staleness). Ignored under BSP.");
ABSL_FLAG(bool, push_pull, true,
          "Push each step's gradient and pull the next step's weights in one round trip per "
          "shard (steps that run one after another: not with --overlap, --async_push or "
          "--priority). Same results; false: two calls.");
ABSL_FLAG(bool, overlap_copies, true,
          "--device cuda: copy each layer's weights to the GPU and its gradient back on a second "
          "stream while other layers compute. Same results; false: one copy each way per step.");
ABSL_FLAG(bool, priority, false,
          "Priority scheduling, any mode: pull weights layer by layer, first layer first, and "
          "start each layer's forward as soon as its weights arrived; push each layer's gradient "
          "as soon as backward produced it, last layer first. Not with --overlap or injected "
          "delays.");
ABSL_FLAG(double, chunk_mib, 0,
          "Large slices: each shard's range travels in calls of at most this many MiB, all in "
          "flight together (0: one call per shard). 4 doubled 64 MiB pulls here. The shard stages "
          "the chunks of a push, a slice per worker that sends them.");
ABSL_FLAG(int32_t, connections, 1, "TCP connections per shard over which the chunks spread.");
ABSL_FLAG(bool, shared_memory, true,
          "Move gradients and weights through shared memory with the shards on this host (the "
          "calls stay gRPC); shards elsewhere, or that refuse it, get them in the messages.");
ABSL_FLAG(int64_t, priority_min_part, 16384,
          "--priority: a layer with fewer parameters travels with the layer before it (0: one "
          "part per layer; the first layer always travels alone).");
ABSL_FLAG(bool, fault_duplicate_pushes, false,
          "Fault injection for tests: send every push twice and fail unless the second comes "
          "back as a duplicate from every shard.");

namespace {

constexpr int kEvalBatch = 1000;
// --evaluate: the result is written, but work the job was required to do was skipped.
constexpr int kExitWorkSkipped = 3;
// --wait_for_job_s: how long new workers get to register when the job is found finished at once.
constexpr absl::Duration kRerunGrace = absl::Seconds(5);

absl::Status WriteFile(const std::string& path, const void* data, size_t bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  const bool ok = std::fwrite(data, 1, bytes, f) == bytes;
  if (std::fclose(f) != 0 || !ok) return absl::DataLossError(absl::StrCat("short write to ", path));
  return absl::OkStatus();
}

// Observer: the test-set loss and accuracy of the servers' current weights, with the servers'
// staleness statistics, as one JSON object.
std::string WorkerMetricsText(const ps::LiveCounters& live, int rank) {
  const ps::PrometheusText::Labels r = {{"rank", std::to_string(rank)}};
  const double step_s = live.step_us.load() / 1e6;
  ps::PrometheusText out;
  out.Counter("ps_worker_steps_total", "Steps pushed.", live.steps.load(), r)
      .Counter("ps_worker_samples_total", "Training samples processed.", live.samples.load(), r)
      .Gauge("ps_worker_step", "The last step completed (-1: none yet).", live.step.load(), r)
      .Gauge("ps_worker_samples_per_second", "Samples over the steps' wall time.",
             step_s > 0 ? live.samples.load() / step_s : 0.0, r)
      .Counter("ps_worker_step_seconds_total", "Wall time of the steps.", step_s, r)
      .Counter("ps_worker_pull_seconds_total", "Time pulling weights.", live.pull_us.load() / 1e6,
               r)
      .Counter("ps_worker_pull_wait_seconds_total",
               "Part of the pull time the shards held the pulls for consistency.",
               live.server_wait_us.load() / 1e6, r)
      .Counter("ps_worker_compute_seconds_total", "Forward and backward time.",
               live.compute_us.load() / 1e6, r)
      .Counter("ps_worker_push_seconds_total", "Time pushing gradients.", live.push_us.load() / 1e6,
               r)
      .Gauge("ps_worker_staleness_max", "Largest staleness of this worker's applied gradients.",
             live.max_staleness.load(), r)
      .Counter("ps_worker_gradients_dropped_total", "Shard pushes refused as too stale.",
               live.dropped.load(), r)
      .Counter("ps_worker_rejoins_total", "Re-registrations after ABORTED answers.",
               live.rejoins.load(), r);
  return out.str();
}

// Waits until no worker can add to the result (AccountWork's job_done), up to `timeout`.
absl::StatusOr<std::vector<ps::ShardReport>> WaitForJob(ps::ParameterClient& client,
                                                        absl::Duration timeout,
                                                        const std::atomic<bool>& stop) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Time next_report = absl::Now();
  for (bool first = true;; first = false) {
    auto reports = client.Status();
    if (!reports.ok()) return reports.status();
    const ps::WorkAccount account = ps::AccountWork(*reports);
    if (account.job_done && first && timeout > absl::ZeroDuration()) {
      // Done before this evaluation began waiting: a finished job, or one started again over
      // finished shards whose new workers have yet to register (and be flagged as a rerun).
      absl::SleepFor(kRerunGrace);
      return client.Status();
    }
    if (account.job_done || timeout <= absl::ZeroDuration()) return reports;
    std::string waiting;
    for (const ps::WorkerWork& w : account.workers) {
      if (w.state == "live" || w.state == "pending") {
        absl::StrAppend(&waiting, waiting.empty() ? "" : ", ", w.rank, " (", w.state, ")");
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the job did not finish within ", absl::ToDoubleSeconds(timeout),
          "s; workers still expected: ", waiting.empty() ? "none declared work yet" : waiting));
    }
    if (absl::Now() >= next_report) {
      spdlog::info("waiting for the job to finish; workers still training: {}",
                   waiting.empty() ? "none has declared its work yet" : waiting);
      next_report = absl::Now() + absl::Seconds(30);
    }
    if (stop.load()) return absl::CancelledError("stopped while waiting for the job");
    absl::SleepFor(absl::Seconds(1));
  }
}

// Observer: the test-set loss and accuracy of the servers' current weights, the servers'
// staleness statistics and the job's work account, as one JSON object (--summary_out) and a
// printed line. Returns false when all work was required (--require_all_work) and some was
// skipped: the result is written and printed all the same. FAILED_PRECONDITION when the shards hold
// a job that had finished before they restarted (its result is not new).
absl::StatusOr<bool> Evaluate(ps::Model& model, ps::Device& device, ps::ParameterClient& client,
                              const ps::Dataset& test, const std::atomic<bool>& stop) {
  auto waited = WaitForJob(client, absl::Seconds(absl::GetFlag(FLAGS_wait_for_job_s)), stop);
  if (!waited.ok()) return waited.status();
  const std::vector<ps::ShardReport>& reports = *waited;
  const ps::WorkAccount work = ps::AccountWork(reports);
  // A job started again over shards that hold a finished one (still running, or restored from
  // their checkpoints) trains nothing: its result would be the old one.
  bool restored_unchanged = work.finished_at_restore;
  bool rerun = false;
  for (const ps::ShardReport& r : reports) {
    restored_unchanged &= r.version == r.restored_version;
    rerun |= r.finished_job_rerun;
  }
  if (restored_unchanged || rerun) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the shards hold a job that had already finished before ",
        rerun ? "this run's workers started" : "they restarted",
        ", and nothing was trained since: its result is not new. To train afresh, start fresh "
        "shards (docker-compose: `down -v` deletes their checkpoints; ps_launch: another "
        "--checkpoint_dir)"));
  }
  // BSP with backup workers leaves the late pushes out by design.
  auto require_all_or = ps::RequireAllWorkFromFlags(!reports.empty() &&
                                                    reports[0].mode == ps::ConsistencyMode::kBsp &&
                                                    reports[0].backup_workers == 0);
  if (!require_all_or.ok()) return require_all_or.status();
  const bool require_all = *require_all_or;

  const int64_t n = model.layout().total();
  std::vector<float> params(n);
  auto pulled = client.Pull(0, /*no_wait=*/true, absl::MakeSpan(params));
  if (!pulled.ok()) return pulled.status();
  auto params_dev = device.Allocate(n * sizeof(float));
  if (!params_dev.ok()) return params_dev.status();
  absl::Status s = device.CopyToDevice(params.data(), n * sizeof(float), params_dev->as<float>());
  if (!s.ok()) return s;
  auto stats = ps::EvaluateDataset(model, device, params_dev->as<float>(), test);
  if (!stats.ok()) return stats.status();

  std::vector<int64_t> histogram;
  std::vector<int64_t> versions;
  int64_t max_staleness = 0;
  double staleness_sum = 0.0;
  int64_t rejected = 0;
  int64_t dropped = 0;
  int64_t late = 0;
  int64_t pushes_accepted = 0;
  int64_t pushes_duplicate = 0;
  int64_t pieces_received = 0;
  int64_t shared_memory_payloads = 0;
  std::vector<int64_t> restored_versions;
  for (const ps::ShardReport& r : reports) {
    versions.push_back(r.version);
    rejected += r.rejected_nonfinite;
    pushes_accepted += r.pushes_accepted;
    pushes_duplicate += r.pushes_duplicate;
    pieces_received += r.pieces_received;
    shared_memory_payloads += r.shared_memory_payloads;
    restored_versions.push_back(r.restored_version);
    for (const auto& w : r.workers) {
      max_staleness = std::max(max_staleness, w.max_staleness);
      dropped += w.dropped;
      late += w.late;
      staleness_sum += w.mean_staleness * w.applied;
      if (histogram.size() < w.staleness_counts.size()) histogram.resize(w.staleness_counts.size());
      for (size_t i = 0; i < w.staleness_counts.size(); ++i) histogram[i] += w.staleness_counts[i];
    }
  }
  std::string per_worker = "[";
  for (const ps::WorkerWork& w : work.workers) {
    ps::JsonObject o;
    o.Add("rank", w.rank)
        .Add("state", w.state)
        .Add("planned_steps", w.planned_steps)
        .Add("gradients_expected", w.gradients_expected)
        .Add("gradients_applied", w.gradients_applied)
        .Add("steps_skipped", w.steps_skipped)
        .Add("samples_skipped", w.samples_skipped);
    absl::StrAppend(&per_worker, w.rank > 0 ? "," : "", o.str());
  }
  per_worker += "]";
  const int64_t applied = work.gradients_applied;
  ps::JsonObject out;
  out.Add("test_accuracy", stats->correct / stats->count)
      .Add("final_loss", stats->loss_sum / stats->count)
      .Add("test_samples", stats->count)
      .Add("params", n)
      .Add("versions", versions)
      .Add("gradients_expected", work.gradients_expected)
      .Add("gradients_applied", applied)
      .Add("samples_skipped", work.samples_skipped)
      .Add("require_all_work", require_all)
      .AddRaw("work", per_worker)
      .Add("max_staleness", max_staleness)
      .Add("mean_staleness", applied > 0 ? staleness_sum / applied : 0.0)
      .Add("staleness_histogram", histogram)
      .Add("rejected_nonfinite", rejected)
      .Add("dropped_gradients", dropped)
      .Add("late_pushes", late)
      .Add("pushes_accepted", pushes_accepted)
      .Add("pushes_duplicate", pushes_duplicate)
      .Add("pieces_received", pieces_received)
      .Add("shared_memory_payloads", shared_memory_payloads)
      .Add("restored_versions", restored_versions)
      .Add("decay_updates", reports.empty() ? int64_t{0} : reports[0].decay_updates);
  const std::string summary_out = absl::GetFlag(FLAGS_summary_out);
  if (!summary_out.empty()) {
    const std::string text = out.str() + "\n";
    s = WriteFile(summary_out, text.data(), text.size());
    if (!s.ok()) return s;
  }
  const std::string weights_out = absl::GetFlag(FLAGS_weights_out);
  if (!weights_out.empty()) {
    s = WriteFile(weights_out, params.data(), params.size() * sizeof(float));
    if (!s.ok()) return s;
  }
  std::printf("test_accuracy %.4f  test_loss %.4f  max_staleness %lld\n",
              stats->correct / stats->count, stats->loss_sum / stats->count,
              static_cast<long long>(max_staleness));
  std::printf("work: %lld of %lld gradients applied, %lld samples skipped\n",
              static_cast<long long>(applied), static_cast<long long>(work.gradients_expected),
              static_cast<long long>(work.samples_skipped));
  for (const ps::WorkerWork& w : work.workers) {
    if (w.samples_skipped == 0) continue;
    std::printf("work: worker %d (%s) skipped %lld steps, %lld samples\n", w.rank, w.state.c_str(),
                static_cast<long long>(w.steps_skipped), static_cast<long long>(w.samples_skipped));
  }
  std::fflush(stdout);
  if (require_all && work.samples_skipped > 0) {
    spdlog::error(
        "{} samples were never trained ({} of {} gradients applied) and all work was required "
        "(--require_all_work)",
        work.samples_skipped, applied, work.gradients_expected);
    return false;
  }
  return true;
}

int ExitCodeFor(const absl::Status& s) {
  if (s.ok()) return 0;
  if (s.code() == absl::StatusCode::kCancelled) return 143;
  if (s.code() == absl::StatusCode::kInvalidArgument) return 2;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  ps::TuneMallocForLargeMessages();
  const std::vector<std::string> rest = ps::ParseCommandLine(
      argc, argv,
      "A data-parallel worker: pulls weights from the shards, computes gradients on its share of "
      "each global batch, pushes them back.\n"
      "  ps_worker --rank 0 --servers 127.0.0.1:5000,127.0.0.1:5001 --epochs 5 --batch_size 32\n"
      "  ps_worker --evaluate --servers ... --summary_out result.json");
  if (!rest.empty()) {
    std::fprintf(stderr, "ps_worker: unexpected argument '%s' (see --help)\n", rest[0].c_str());
    return 2;
  }
  const bool evaluate = absl::GetFlag(FLAGS_evaluate);
  const int rank = absl::GetFlag(FLAGS_rank) >= 0
                       ? absl::GetFlag(FLAGS_rank)
                       : ps::IndexFromEnvironment("JOB_COMPLETION_INDEX", false).value_or(0);
  ps::SetUpLogging(evaluate ? "eval" : absl::StrCat("worker-", rank),
                   absl::GetFlag(FLAGS_log_level));

  auto fail = [](const absl::Status& s) {
    spdlog::error("{}", s.ToString());
    return ExitCodeFor(s);
  };
  auto device_or = ps::CreateDevice(absl::GetFlag(FLAGS_device));
  if (!device_or.ok()) return fail(device_or.status());
  ps::Device& device = **device_or;
  auto workload = ps::WorkloadFromFlags();
  if (!workload.ok()) return fail(workload.status());
  auto test = ps::OpenWorkloadData(*workload, ps::Split::kTest);
  if (!test.ok()) return fail(test.status());
  const int batch_size = workload->batch_size;
  auto model = ps::MakeModel(workload->model, (*test)->shape(), device,
                             evaluate ? kEvalBatch : std::max(batch_size, kEvalBatch));
  if (!model.ok()) return fail(model.status());

  ps::GrpcClientOptions client_options;
  client_options.servers = absl::StrSplit(absl::GetFlag(FLAGS_servers), ',', absl::SkipEmpty());
  client_options.fingerprint = (*model)->layout().fingerprint();
  client_options.total_params = (*model)->layout().total();
  client_options.rank = rank;
  client_options.call_timeout = absl::Seconds(absl::GetFlag(FLAGS_call_timeout_s));
  client_options.pull_timeout = absl::Seconds(absl::GetFlag(FLAGS_pull_timeout_s));
  client_options.retry_for = absl::GetFlag(FLAGS_retry_s) == 0
                                 ? absl::InfiniteDuration()
                                 : absl::Seconds(absl::GetFlag(FLAGS_retry_s));
  client_options.duplicate_pushes = absl::GetFlag(FLAGS_fault_duplicate_pushes);
  if (absl::GetFlag(FLAGS_max_message_mb) < 1 || absl::GetFlag(FLAGS_max_message_mb) > 2047 ||
      absl::GetFlag(FLAGS_call_timeout_s) < 1 || absl::GetFlag(FLAGS_pull_timeout_s) < 1 ||
      absl::GetFlag(FLAGS_retry_s) < 0) {
    return fail(absl::InvalidArgumentError(
        "--max_message_mb must be in [1, 2047], the timeouts >= 1 and --retry_s >= 0"));
  }
  client_options.max_message_bytes = absl::GetFlag(FLAGS_max_message_mb) << 20;
  {
    auto push_encoding = ps::ParseTensorEncoding(absl::GetFlag(FLAGS_push_encoding));
    if (!push_encoding.ok()) return fail(push_encoding.status());
    auto pull_encoding = ps::ParseTensorEncoding(absl::GetFlag(FLAGS_pull_encoding));
    if (!pull_encoding.ok()) return fail(pull_encoding.status());
    client_options.push_encoding = *push_encoding;
    client_options.pull_encoding = *pull_encoding;
    client_options.topk_ratio = absl::GetFlag(FLAGS_topk_ratio);
  }
  if (absl::GetFlag(FLAGS_chunk_mib) < 0 || absl::GetFlag(FLAGS_connections) < 1) {
    return fail(absl::InvalidArgumentError("--chunk_mib must be >= 0 and --connections >= 1"));
  }
  client_options.chunk_bytes = static_cast<int64_t>(absl::GetFlag(FLAGS_chunk_mib) * (1 << 20));
  client_options.connections = absl::GetFlag(FLAGS_connections);
  client_options.shared_memory = absl::GetFlag(FLAGS_shared_memory);
  // Double buffers (a step computing while another travels) take a second set of areas.
  client_options.shared_memory_slots =
      absl::GetFlag(FLAGS_overlap) || absl::GetFlag(FLAGS_async_push) ? 2 : 1;
  {
    auto security = ps::MakeClientSecurity(ps::SecurityOptionsFromFlags());
    if (!security.ok()) return fail(security.status());
    client_options.security = *std::move(security);
  }
  auto client = ps::GrpcParameterClient::Create(client_options);
  if (!client.ok()) return fail(client.status());

  std::atomic<bool> stop{false};
  ps::GrpcParameterClient* raw_client = client->get();
  ps::ShutdownSignalWatcher watcher([&stop, raw_client](int signo) {
    spdlog::info("signal {}: stopping", signo);
    stop.store(true);
    raw_client->Cancel();
  });

  if (evaluate) {
    absl::StatusOr<bool> all_work = Evaluate(**model, device, **client, **test, stop);
    if (!all_work.ok()) return fail(all_work.status());
    return *all_work ? 0 : kExitWorkSkipped;
  }

  auto train = ps::OpenWorkloadData(*workload, ps::Split::kTrain);
  if (!train.ok()) return fail(train.status());

  ps::TrainerOptions options;
  options.rank = rank;
  options.batch_size = batch_size;
  options.accumulate = workload->accumulate;
  options.epochs = workload->epochs;
  options.seed = workload->seed;
  options.overlap = absl::GetFlag(FLAGS_overlap);
  options.priority = absl::GetFlag(FLAGS_priority);
  options.async_push = absl::GetFlag(FLAGS_async_push);
  options.push_pull = absl::GetFlag(FLAGS_push_pull);
  options.overlap_copies = absl::GetFlag(FLAGS_overlap_copies);
  options.priority_min_part = absl::GetFlag(FLAGS_priority_min_part);
  options.delays.slowdown = absl::GetFlag(FLAGS_slowdown);
  {
    const std::string jitter = absl::GetFlag(FLAGS_jitter);
    if (!jitter.empty()) {
      std::vector<std::string> parts = absl::StrSplit(jitter, ':');
      if (parts.size() != 2 || !absl::SimpleAtod(parts[0], &options.delays.jitter_probability) ||
          !absl::SimpleAtod(parts[1], &options.delays.jitter_factor)) {
        return fail(absl::InvalidArgumentError(
            absl::StrCat("--jitter '", jitter, "' must be PROBABILITY:FACTOR, e.g. 0.1:4")));
      }
    }
    const std::string pause = absl::GetFlag(FLAGS_pause);
    if (!pause.empty()) {
      std::vector<std::string> parts = absl::StrSplit(pause, ':');
      double seconds = 0;
      if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &options.delays.pause_step) ||
          !absl::SimpleAtod(parts[1], &seconds) || options.delays.pause_step < 0) {
        return fail(absl::InvalidArgumentError(
            absl::StrCat("--pause '", pause, "' must be STEP:SECONDS, e.g. 100:5")));
      }
      options.delays.pause = absl::Seconds(seconds);
    }
  }
  options.evaluate_each_epoch = rank == 0 && absl::GetFlag(FLAGS_eval_each_epoch);
  options.evaluate_every = rank == 0 ? absl::GetFlag(FLAGS_eval_every) : 0;
  options.register_timeout = absl::Seconds(absl::GetFlag(FLAGS_register_timeout_s));
  if (absl::GetFlag(FLAGS_max_seconds) < 0) {
    return fail(absl::InvalidArgumentError("--max_seconds must be >= 0"));
  }
  if (absl::GetFlag(FLAGS_max_seconds) > 0) {
    options.max_duration = absl::Seconds(absl::GetFlag(FLAGS_max_seconds));
  }
  if (absl::Status s = ps::ValidateTrainerOptions(options); !s.ok()) return fail(s);

  std::unique_ptr<ps::JsonLinesWriter> metrics;
  const std::string metrics_file = absl::GetFlag(FLAGS_metrics_file);
  if (!metrics_file.empty()) {
    // Appended to: a worker restarted at its rank continues the file of its predecessor.
    auto writer = ps::JsonLinesWriter::Open(metrics_file, /*append=*/true);
    if (!writer.ok()) return fail(writer.status());
    metrics = std::move(*writer);
  }
  const int expected_workers = absl::GetFlag(FLAGS_num_workers);
  ps::Trainer trainer(options, **model, device, **client, **train, test->get(), metrics.get(),
                      [](const ps::EpochReport& r) {
                        // The user-facing progress line (not a log line): ps_launch shows it.
                        std::printf(
                            "epoch %d/%d  train_loss %.4f  test_loss %.4f  test_acc %.4f  "
                            "samples/s %.0f  time %.1fs\n",
                            r.epoch, r.epochs, r.train_loss, r.test_loss, r.test_accuracy,
                            r.samples_per_sec, absl::ToDoubleSeconds(r.elapsed));
                        std::fflush(stdout);
                      });
  std::unique_ptr<ps::MetricsHttpServer> metrics_server;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    const ps::LiveCounters& live = trainer.live();
    auto served = ps::MetricsHttpServer::Start(
        absl::GetFlag(FLAGS_metrics_host), absl::GetFlag(FLAGS_metrics_port),
        [&live, rank] { return WorkerMetricsText(live, rank); });
    if (!served.ok()) return fail(served.status());
    metrics_server = std::move(*served);
    const std::string port_file = absl::GetFlag(FLAGS_metrics_port_file);
    if (!port_file.empty()) std::ofstream(port_file) << metrics_server->port() << "\n";
    spdlog::info("metrics on port {}", metrics_server->port());
  }
  if (expected_workers > 0) {
    // Checked by a Register round trip before training: a mismatch is a configuration error.
    auto info = (*client)->Register(rank, options.register_timeout);
    if (!info.ok()) return fail(info.status());
    if (info->num_workers != expected_workers) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "--num_workers ", expected_workers, " but the servers expect ", info->num_workers)));
    }
  }
  absl::Status s = trainer.Run(stop);
  watcher.Stop();
  if (!s.ok()) return fail(s);
  return 0;
}
