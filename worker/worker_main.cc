// ps_worker: one data-parallel worker (or, with --evaluate, an observer that measures the
// servers' current weights on the test set). Parses flags, then runs the Trainer until done or
// until SIGINT/SIGTERM (exit 143 then: an interrupted worker has not finished its work).

#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/json_lines.h"
#include "common/base/logging.h"
#include "common/base/process_tuning.h"
#include "common/base/random.h"
#include "common/base/shutdown_signal.h"
#include "common/base/status_macros.h"
#include "common/base/whole_file.h"
#include "common/cli/cli.h"
#include "common/cli/client_flags.h"
#include "common/cli/cluster_flags.h"
#include "common/cli/endpoint_flags.h"
#include "common/cli/job_flags.h"
#include "common/cli/log_flags.h"
#include "common/cli/security_flags.h"
#include "common/cli/workload_flags.h"
#include "common/codec/tensor_codec.h"
#include "common/data/dataset.h"
#include "common/data/text_dataset.h"
#include "common/device/cpu_device.h"
#include "common/metrics/prometheus.h"
#include "common/nn/model.h"
#include "spdlog/spdlog.h"
#include "worker/device_select.h"
#include "worker/grpc_parameter_client.h"
#include "worker/job_evaluation.h"
#include "worker/text_generation.h"
#include "worker/trainer.h"
#include "worker/transfer_flags.h"
#include "worker/worker_flags.h"

ABSL_FLAG(int32_t, rank, -1,
          "This worker's rank in [0, num_workers); -1: $JOB_COMPLETION_INDEX (an Indexed Job's "
          "pod), else 0.");
ABSL_FLAG(std::string, metrics_file, "", "Append per-step metrics as JSON lines to this file.");
ABSL_FLAG(std::string, pause, "", "STEP:SECONDS: pause that long once, after computing STEP.");
ABSL_FLAG(double, slowdown, 1.0,
          "Straggler factor >= 1: every step takes this many times the normal step time.");
ABSL_FLAG(bool, eval_each_epoch, true, "Rank 0 measures test accuracy at each epoch end.");
ABSL_FLAG(bool, evaluate, false,
          "Observer mode: read the current weights, evaluate the test set, write --summary_out.");
ABSL_FLAG(std::string, summary_out, "", "--evaluate: write the result as one JSON object here.");
ABSL_FLAG(int32_t, generate, 0,
          "Observer mode for a language model (--model gpt, --data text): read the shards' "
          "current weights and print this many characters continuing --prompt.");
ABSL_FLAG(std::string, prompt, "\n",
          "--generate: the text to continue (in the corpus's characters).");
ABSL_FLAG(double, temperature, 0.8,
          "--generate: the logits are divided by it before sampling (0: the most likely "
          "character each time). The draws follow --seed.");
ABSL_FLAG(int32_t, wait_for_job_s, 0,
          "--evaluate: first wait up to this many seconds until no worker can add to the result "
          "(each has pushed all its steps or is gone); 0: evaluate at once.");
ABSL_FLAG(int32_t, register_timeout_s, 60, "Seconds to wait for the servers to come up.");
ABSL_FLAG(int32_t, call_timeout_s, 30, "Deadline of a Register, Init, Push or status call.");
ABSL_FLAG(int32_t, pull_timeout_s, 600, "Deadline of a pull (it may wait for slow workers).");
ABSL_FLAG(int32_t, retry_s, 0,
          "Keep retrying UNAVAILABLE answers (a shard restarting) this many seconds; 0: until "
          "the shard is back (the launcher or orchestrator ends a job whose shard is gone).");
ABSL_FLAG(bool, check_only, false,
          "Check the flags and the data (open the data set, build the model, read every option) "
          "and exit: 0, or 2 when one is wrong; connects to nothing (ps_launch --dry_run runs "
          "it).");
ABSL_FLAG(bool, overlap_copies, true,
          "--device cuda: copy each layer's weights to the GPU and its gradient back on a second "
          "stream while other layers compute. Same results; false: one copy each way per step.");

namespace {

constexpr int kEvalBatch = 1000;
// --evaluate: the result is written, but work the job was required to do was skipped.
constexpr int kExitWorkSkipped = 3;

// The worker's Prometheus metrics.
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

// Logs a failure and gives the exit code: 0 for OK, 143 when stopped by a signal, else
// ExitCodeOf's: 2 for a configuration error no restart fixes (a bad value, a file the flags name,
// a token the shards refuse), 1 otherwise.
int Fail(const absl::Status& s) {
  if (s.ok()) return 0;
  spdlog::error("{}", s.ToString());
  return s.code() == absl::StatusCode::kCancelled ? 143 : ps::ExitCodeOf(s);
}

// The input or the flags are wrong, so exit 2, a configuration error that a launcher does not
// restart the worker for: a data set that cannot be read (missing, malformed), or a model the
// flags describe that cannot be built (its memory for the batch beyond the device's).
int FailConfiguration(const absl::Status& s) {
  spdlog::error("{}", s.ToString());
  return ps::kExitConfigurationError;
}

// The fingerprint the shards check: the model's parameters, and what the data's ids mean (a
// text's vocabulary), so a worker whose corpus has another vocabulary of the same size is
// refused (FAILED_PRECONDITION) instead of training other characters into the same rows.
absl::StatusOr<ps::GrpcClientOptions> ClientOptionsFromFlags(const ps::Model& model,
                                                             const ps::Dataset& data, int rank) {
  ps::GrpcClientOptions o;
  o.servers = absl::StrSplit(absl::GetFlag(FLAGS_servers), ',', absl::SkipEmpty());
  o.fingerprint = model.description().fingerprint();
  if (data.meaning_fingerprint() != 0) {
    o.fingerprint = ps::Mix64(o.fingerprint ^ ps::Mix64(data.meaning_fingerprint()));
  }
  o.total_params = model.layout().total();
  o.tables = model.description().sparse();
  o.rank = rank;
  o.call_timeout = absl::Seconds(absl::GetFlag(FLAGS_call_timeout_s));
  o.pull_timeout = absl::Seconds(absl::GetFlag(FLAGS_pull_timeout_s));
  o.retry_for = absl::GetFlag(FLAGS_retry_s) == 0 ? absl::InfiniteDuration()
                                                  : absl::Seconds(absl::GetFlag(FLAGS_retry_s));
  o.duplicate_pushes = absl::GetFlag(FLAGS_fault_duplicate_pushes);
  if (absl::GetFlag(FLAGS_max_message_mb) < 1 || absl::GetFlag(FLAGS_max_message_mb) > 2047 ||
      absl::GetFlag(FLAGS_call_timeout_s) < 1 || absl::GetFlag(FLAGS_pull_timeout_s) < 1 ||
      absl::GetFlag(FLAGS_retry_s) < 0) {
    return absl::InvalidArgumentError(
        "--max_message_mb must be in [1, 2047], the timeouts >= 1 and --retry_s >= 0");
  }
  o.max_message_bytes = absl::GetFlag(FLAGS_max_message_mb) << 20;
  ASSIGN_OR_RETURN(o.push_encoding, ps::ParseTensorEncoding(absl::GetFlag(FLAGS_push_encoding)));
  ASSIGN_OR_RETURN(o.pull_encoding, ps::ParseTensorEncoding(absl::GetFlag(FLAGS_pull_encoding)));
  o.topk_ratio = absl::GetFlag(FLAGS_topk_ratio);
  RETURN_IF_ERROR(ps::SetTransferFromFlags(o));
  o.shared_memory = absl::GetFlag(FLAGS_shared_memory);
  o.local_calls = absl::GetFlag(FLAGS_local_calls);
  // Double buffers (a step computing while another travels) take a second set of areas.
  o.shared_memory_slots = absl::GetFlag(FLAGS_overlap) || absl::GetFlag(FLAGS_async_push) ? 2 : 1;
  ASSIGN_OR_RETURN(o.security, ps::MakeClientSecurity(ps::SecurityOptionsFromFlags()));
  return o;
}

// --jitter PROBABILITY:FACTOR, --pause STEP:SECONDS and --slowdown.
absl::StatusOr<ps::DelayOptions> DelayOptionsFromFlags() {
  ps::DelayOptions d;
  d.slowdown = absl::GetFlag(FLAGS_slowdown);
  RETURN_IF_ERROR(ps::ParseJitter("--jitter", absl::GetFlag(FLAGS_jitter), &d));
  RETURN_IF_ERROR(ps::ParsePause("--pause", absl::GetFlag(FLAGS_pause), &d));
  return d;
}

absl::StatusOr<ps::TrainerOptions> TrainerOptionsFromFlags(int rank, const ps::Workload& w) {
  ps::TrainerOptions o;
  o.rank = rank;
  // Known before any shard answers: a rank outside the job would otherwise wait on the shards
  // and then be refused by them.
  if (const int workers = absl::GetFlag(FLAGS_num_workers); workers > 0 && rank >= workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank ", rank, " is not in [0, --num_workers ", workers, ")"));
  }
  o.batch_size = w.batch_size;
  o.accumulate = w.accumulate;
  o.epochs = w.epochs;
  o.steps = w.steps;
  o.clip_norm = absl::GetFlag(FLAGS_clip_norm);
  if (o.clip_norm < 0) return absl::InvalidArgumentError("--clip_norm must be >= 0");
  o.seed = w.seed;
  o.schedule = ps::ScheduleRequest{absl::GetFlag(FLAGS_overlap), absl::GetFlag(FLAGS_async_push),
                                   absl::GetFlag(FLAGS_push_pull), absl::GetFlag(FLAGS_priority)};
  o.overlap_copies = absl::GetFlag(FLAGS_overlap_copies);
  o.priority_min_part = absl::GetFlag(FLAGS_priority_min_part);
  ASSIGN_OR_RETURN(o.delays, DelayOptionsFromFlags());
  o.evaluate_each_epoch = rank == 0 && absl::GetFlag(FLAGS_eval_each_epoch);
  if (absl::GetFlag(FLAGS_eval_every) < 0) {
    return absl::InvalidArgumentError("--eval_every must be >= 0 (0: only at epoch ends)");
  }
  o.evaluate_every = rank == 0 ? absl::GetFlag(FLAGS_eval_every) : 0;
  o.evaluate_inline = absl::GetFlag(FLAGS_eval_inline);
  o.register_timeout = absl::Seconds(absl::GetFlag(FLAGS_register_timeout_s));
  if (absl::GetFlag(FLAGS_max_seconds) < 0) {
    return absl::InvalidArgumentError("--max_seconds must be >= 0");
  }
  if (absl::GetFlag(FLAGS_max_seconds) > 0) {
    o.max_duration = absl::Seconds(absl::GetFlag(FLAGS_max_seconds));
  }
  RETURN_IF_ERROR(ps::ValidateTrainerOptions(o));
  return o;
}

// The /metrics endpoint, when --metrics_port asks for one; null otherwise.
absl::StatusOr<std::unique_ptr<ps::MetricsHttpServer>> ServeMetrics(const ps::LiveCounters& live,
                                                                    int rank) {
  if (absl::GetFlag(FLAGS_metrics_port) < 0) return nullptr;
  ASSIGN_OR_RETURN(std::unique_ptr<ps::MetricsHttpServer> server,
                   ps::MetricsHttpServer::Start(
                       absl::GetFlag(FLAGS_metrics_host), absl::GetFlag(FLAGS_metrics_port),
                       [&live, rank] { return WorkerMetricsText(live, rank); }));
  RETURN_IF_ERROR(ps::WritePortFile("--metrics_port_file", absl::GetFlag(FLAGS_metrics_port_file),
                                    server->port()));
  spdlog::info("metrics on port {}", server->port());
  return server;
}

// Checked by a Register round trip before training (--num_workers > 0): a mismatch is a
// configuration error.
absl::Status CheckWorkerCount(ps::ParameterClient& client, int rank, absl::Duration timeout) {
  const int expected = absl::GetFlag(FLAGS_num_workers);
  if (expected <= 0) return absl::OkStatus();
  const absl::StatusOr<ps::ClusterInfo> info = client.Register(rank, timeout);
  if (!info.ok()) return ps::AsJoinError(info.status());
  if (info->num_workers != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num_workers ", expected, " but the servers expect ", info->num_workers));
  }
  return absl::OkStatus();
}

// The user-facing progress line (not a log line): ps_launch shows it.
void PrintEpoch(const ps::EpochReport& r) {
  // A click model's test loss is the log-loss, and its quality the AUC.
  const bool clicks = r.test_auc >= 0;
  std::printf("epoch %d/%.3g  train_loss %.4f  %s %.4f  %s %.4f  samples/s %.0f  time %.1fs\n",
              r.epoch, r.epochs, r.train_loss, clicks ? "test_logloss" : "test_loss", r.test_loss,
              clicks ? "test_auc" : "test_acc", clicks ? r.test_auc : r.test_accuracy,
              r.samples_per_sec, absl::ToDoubleSeconds(r.elapsed));
  std::fflush(stdout);
}

// Trains this rank to the end; the exit code.
// --generate: the shards' weights as they are now, then text continuing --prompt on stdout.
int Generate(ps::Model& model, ps::Device& device, ps::GrpcParameterClient& client,
             const ps::Dataset& data, uint64_t seed) {
  const auto* text = dynamic_cast<const ps::TextDataset*>(&data);
  if (text == nullptr) {
    return Fail(absl::InvalidArgumentError("--generate needs a language model on --data text"));
  }
  absl::StatusOr<std::vector<int32_t>> prompt = text->Encode(absl::GetFlag(FLAGS_prompt));
  if (!prompt.ok()) return FailConfiguration(prompt.status());
  const int64_t n = model.layout().total();
  std::vector<float> params(n);
  absl::Status s = client.Pull(0, /*no_wait=*/true, absl::MakeSpan(params)).status();
  absl::StatusOr<ps::DeviceBuffer> params_dev = device.Allocate(n * sizeof(float));
  if (s.ok()) s = params_dev.status();
  if (s.ok()) s = device.CopyToDevice(params.data(), n * sizeof(float), params_dev->as<float>());
  if (!s.ok()) return Fail(s);
  ps::GenerationOptions options;
  options.tokens = absl::GetFlag(FLAGS_generate);
  options.temperature = absl::GetFlag(FLAGS_temperature);
  options.seed = seed;
  absl::StatusOr<std::vector<int32_t>> ids =
      ps::GenerateTokens(model, device, params_dev->as<float>(), *prompt, options);
  if (!ids.ok()) return Fail(ids.status());
  std::printf("%s%s\n", absl::GetFlag(FLAGS_prompt).c_str(), text->Decode(*ids).c_str());
  return 0;
}

int Train(ps::Model& model, ps::Device& device, ps::GrpcParameterClient& client,
          const ps::Workload& workload, const ps::Dataset& test, int eval_batch, int rank,
          const std::atomic<bool>& stop) {
  auto train = ps::OpenWorkloadData(workload, ps::Split::kTrain);
  if (!train.ok()) return FailConfiguration(train.status());
  auto options = TrainerOptionsFromFlags(rank, workload);
  if (!options.ok()) return Fail(options.status());
  std::unique_ptr<ps::JsonLinesWriter> metrics;
  if (const std::string file = absl::GetFlag(FLAGS_metrics_file); !file.empty()) {
    // Appended to: a worker restarted at its rank continues the file of its predecessor.
    auto writer = ps::JsonLinesWriter::Open(file, /*append=*/true);
    if (!writer.ok()) return Fail(writer.status());
    metrics = std::move(*writer);
  }
  // SSP and ASP evaluate beside training, with a copy of the model on the CPU (whatever the
  // training device: CudaDevice makes its GPU current only on the thread that created it). The
  // device outlives the trainer, which holds the copy and its buffers.
  ps::CpuDevice eval_device;
  ps::Trainer trainer(*options, model, device, client, **train, &test, metrics.get(), PrintEpoch);
  trainer.UseEvaluationReplica(eval_device, [&](ps::Device& on) {
    return ps::MakeModel(workload.model, test.shape(), on, eval_batch);
  });
  auto metrics_server = ServeMetrics(trainer.live(), rank);
  if (!metrics_server.ok()) return Fail(metrics_server.status());
  if (absl::Status s = CheckWorkerCount(client, rank, options->register_timeout); !s.ok()) {
    return Fail(s);
  }
  return Fail(trainer.Run(stop));
}

// --check_only, once the model and the client's options are built: what a training run reads
// before it connects, too.
int CheckOnly(const ps::Workload& workload, const ps::GrpcClientOptions& client, int rank,
              bool evaluate) {
  if (absl::Status s = ps::ValidateGrpcClientOptions(client); !s.ok()) return Fail(s);
  if (!evaluate) {
    auto train = ps::OpenWorkloadData(workload, ps::Split::kTrain);
    if (!train.ok()) return FailConfiguration(train.status());
    if (auto options = TrainerOptionsFromFlags(rank, workload); !options.ok()) {
      return Fail(options.status());
    }
  }
  spdlog::info("flags and data checked");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ps::TuneProcessForTensorTraffic();
  ps::ParseFlags(
      argc, argv,
      "A data-parallel worker: pulls weights from the shards, computes gradients on its share of "
      "each global batch, pushes them back.\n"
      "  ps_worker --rank 0 --servers 127.0.0.1:5000,127.0.0.1:5001 --epochs 5 --batch_size 32\n"
      "  ps_worker --evaluate --servers ... --summary_out result.json");
  const bool evaluate = absl::GetFlag(FLAGS_evaluate);
  const int rank = ps::IndexFromFlagOrEnvironment(
      "rank", absl::GetFlag(FLAGS_rank), "JOB_COMPLETION_INDEX", /*ordinal_of_name=*/false);
  ps::SetUpLogging(evaluate ? "eval" : absl::StrCat("worker-", rank),
                   absl::GetFlag(FLAGS_log_level));
  auto device = ps::CreateDevice(absl::GetFlag(FLAGS_device), rank);
  // No GPU, or a build without CUDA: restarting the worker cannot help.
  if (!device.ok()) return FailConfiguration(device.status());
  // Another CPU's kernels round differently: the line tells why two hosts' BSP runs differ in the
  // last bits.
  if ((*device)->name() == "cpu") {
    spdlog::info("cpu device: OpenBLAS {} kernels", ps::CpuDevice::BlasKernels());
  } else {
    spdlog::info("device {}", (*device)->name());
  }
  auto workload = ps::WorkloadFromFlags();
  if (!workload.ok()) return Fail(workload.status());
  auto test = ps::OpenWorkloadData(*workload, ps::Split::kTest);
  if (!test.ok()) return FailConfiguration(test.status());
  // Evaluation batches of about kEvalBatch predictions: a language model's window holds one per
  // position, and its layers keep scratch memory per position.
  const int eval_batch = std::max(1, kEvalBatch / (*test)->shape().labels);
  auto model = ps::MakeModel(workload->model, (*test)->shape(), **device,
                             evaluate ? eval_batch : std::max(workload->batch_size, eval_batch));
  if (!model.ok()) return FailConfiguration(model.status());
  auto client_options = ClientOptionsFromFlags(**model, **test, rank);
  if (!client_options.ok()) return Fail(client_options.status());
  if (absl::GetFlag(FLAGS_check_only)) return CheckOnly(*workload, *client_options, rank, evaluate);
  auto client = ps::GrpcParameterClient::Create(*client_options);
  if (!client.ok()) return Fail(client.status());

  std::atomic<bool> stop{false};
  ps::GrpcParameterClient* raw_client = client->get();
  ps::ShutdownSignalWatcher watcher([&stop, raw_client](int signo) {
    spdlog::info("signal {}: stopping", signo);
    stop.store(true);
    raw_client->Cancel();
  });
  if (absl::GetFlag(FLAGS_generate) > 0) {
    return Generate(**model, **device, **client, **test, workload->seed);
  }
  if (!evaluate) {
    return Train(**model, **device, **client, *workload, **test, eval_batch, rank, stop);
  }
  ps::JobEvaluationOptions evaluation;
  evaluation.wait_for_job = absl::Seconds(absl::GetFlag(FLAGS_wait_for_job_s));
  evaluation.require_all_work = ps::RequireAllWorkFromFlags;
  evaluation.summary_out = absl::GetFlag(FLAGS_summary_out);
  evaluation.weights_out = absl::GetFlag(FLAGS_weights_out);
  absl::StatusOr<bool> all_work =
      ps::EvaluateJob(**model, **device, **client, **test, evaluation, stop);
  if (!all_work.ok()) return Fail(all_work.status());
  return *all_work ? 0 : kExitWorkSkipped;
}
