// ps_bench_train: training throughput of the whole system on loopback: S shards (ps_server's
// ShardServer) and W workers (ps_worker's Trainer and gRPC client, one thread and one BLAS thread
// each), all in this process with real TCP between them, on Fashion-MNIST (the MLP, the CNN) or
// a text corpus (the gpt language model: AdamW and clipping, as it trains). One JSON line per
// (model, workers x shards, gradient encoding) with samples/s (and tokens/s), the share of step
// time spent
// waiting on communication (pull + push), bytes per step, and the ratio to a reference measured
// in the same run: the same model trained locally on the same batches with no parameter server.
// With --vs_pytorch, the MLP's and gpt's f32 runs are also compared with PyTorch on the same
// data, batch, optimizer and threads (bench/peers/pytorch_mlp.py: one process for 1 worker, DDP
// with gloo and W processes for W workers; bench/peers/pytorch_gpt.py: one process and thread
// with the whole global batch), run by Debian's python3.
//
//   ps_bench_train [--models mlp,cnn,gpt] [--configs 1x1,2x1,2x2,4x2] [--encodings f32,bf16]
//                  [--mode bsp] [--overlap] [--async_push] [--push_pull=false|--compare_push_pull]
//                  [--schedules whole,priority] [--steps 200] [--cnn_steps 40] [--gpt_steps 40]
//                  [--text data/text/kjv.txt] [--layers 4 --heads 4 --dim 128 --context 64]
//                  [--vs_pytorch]

#include <atomic>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/json_lines.h"
#include "common/base/process_tuning.h"
#include "common/base/status_macros.h"
#include "common/cli/cli.h"
#include "common/cli/cluster_flags.h"
#include "common/cli/workload_flags.h"
#include "common/codec/tensor_codec.h"
#include "common/data/dataset.h"
#include "common/data/text_dataset.h"
#include "common/device/cpu_device.h"
#include "common/nn/model.h"
#include "common/optim/optimizer.h"
#include "server/server_flags.h"
#include "server/shard_server.h"
#include "spdlog/spdlog.h"
#include "worker/batch_plan.h"
#include "worker/grpc_parameter_client.h"
#include "worker/trainer.h"
#include "worker/worker_flags.h"

ABSL_FLAG(std::vector<std::string>, models, std::vector<std::string>({"mlp", "cnn"}),
          "Models: mlp, cnn (Fashion-MNIST), gpt (the --text corpus, the workload's --layers, "
          "--heads, --dim and --context).");
ABSL_FLAG(std::string, text, "data/text/kjv.txt",
          "The gpt model's corpus (scripts/setup.sh writes the default).");
ABSL_FLAG(int32_t, gpt_steps, 40, "gpt training steps per worker per measurement.");
ABSL_FLAG(std::vector<std::string>, configs, std::vector<std::string>({"1x1", "2x1", "2x2", "4x2"}),
          "WORKERSxSHARDS configurations.");
ABSL_FLAG(std::vector<std::string>, encodings, std::vector<std::string>({"f32", "bf16"}),
          "Gradient encodings (f32, bf16, fp16, topk).");
ABSL_FLAG(bool, compare_push_pull, false,
          "Run each configuration with separate Push and Pull calls first, then with PushPull, "
          "back to back; the PushPull line carries ratio_vs_separate.");
ABSL_FLAG(std::vector<std::string>, schedules, std::vector<std::string>({"whole"}),
          "How each step's tensors travel: whole (one call per shard after backward) and/or "
          "priority (layer by layer: first layer's weights first, last layer's gradient as soon "
          "as backward produced it). With both, priority lines carry ratio_vs_whole.");
ABSL_FLAG(int32_t, cnn_steps, 40, "CNN training steps per worker per measurement.");
ABSL_FLAG(bool, vs_pytorch, false,
          "Also run bench/peers/pytorch_mlp.py for the MLP's f32 runs and print the ratio.");
ABSL_FLAG(std::string, python, "/usr/bin/python3", "Python with Debian's python3-torch.");
ABSL_FLAG(std::string, peers_dir, "bench/peers", "Folder of the peer scripts.");

namespace {

// The local reference: the same batches through the same model (CPU device, so host memory is
// device memory), the shards' optimizer applied in place.
absl::StatusOr<double> LocalSamplesPerSec(ps::Model& model, const ps::Dataset& train, int batch,
                                          int steps, const ps::OptimizerOptions& oo) {
  const int64_t n = model.layout().total();
  std::vector<float> params(n), grads(n);
  model.InitParams(1, params.data());
  ps::Optimizer optimizer(oo, n);
  ps::BatchPlanOptions po;
  po.dataset_size = train.size();
  po.batch_size = batch;
  auto plan = ps::BatchPlan::Create(po);
  if (!plan.ok()) return plan.status();
  std::vector<float> x(static_cast<size_t>(batch) * train.features());
  std::vector<int32_t> y(static_cast<size_t>(batch) * train.shape().labels), idx;
  const absl::Time start = absl::Now();
  for (int s = 0; s < steps; ++s) {
    plan->MicroBatch(s, 0, &idx);
    train.Gather(idx.data(), batch, x.data(), y.data());
    std::fill(grads.begin(), grads.end(), 0.0f);
    auto st = model.ForwardBackward(params.data(), x.data(), y.data(), batch, 1.0f, grads.data());
    if (!st.ok()) return st.status();
    optimizer.Apply(s, grads, absl::MakeSpan(params));
  }
  return static_cast<double>(steps) * batch / absl::ToDoubleSeconds(absl::Now() - start);
}

struct RunResult {
  double samples_per_sec = 0;
  double comm_share = 0;  // (pull + push) / step time, over all workers
  double pull_share = 0;
  double compute_share = 0;
  double push_share = 0;
  double step_ms = 0;
  int64_t push_bytes_per_step = 0;  // per worker
  int64_t pull_bytes_per_step = 0;
};

// W trainer threads against S fresh shards (optimizer `oo`); every worker runs `steps` steps.
absl::StatusOr<RunResult> RunCluster(const ps::ModelSpec& spec, const ps::Dataset& data,
                                     int workers, int shards, int steps, int batch,
                                     const ps::OptimizerOptions& oo, double clip_norm,
                                     ps::TensorEncoding encoding, bool priority, bool push_pull) {
  ASSIGN_OR_RETURN(ps::ConsistencyMode mode, ps::ParseConsistencyMode(absl::GetFlag(FLAGS_mode)));
  std::vector<std::unique_ptr<ps::ShardServer>> servers;
  std::vector<std::string> addresses;
  for (int s = 0; s < shards; ++s) {
    ps::ShardServerOptions so;
    so.shard.shard_id = s;
    so.shard.num_shards = shards;
    so.shard.consistency.mode = mode;
    so.shard.consistency.staleness =
        mode == ps::ConsistencyMode::kSsp ? absl::GetFlag(FLAGS_staleness) : 0;
    so.shard.consistency.num_workers = workers;
    so.shard.optimizer = oo;
    ASSIGN_OR_RETURN(auto server, ps::ShardServer::Start(so));
    addresses.push_back(absl::StrCat("127.0.0.1:", server->port()));
    servers.push_back(std::move(server));
  }
  std::vector<ps::TrainStats> stats(workers);
  std::vector<absl::Status> status(workers);
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      ps::CpuDevice dev(1);
      auto model = ps::MakeModel(spec, data.shape(), dev, batch);
      if (!model.ok()) {
        status[w] = model.status();
        return;
      }
      ps::GrpcClientOptions co;
      co.servers = addresses;
      co.fingerprint = (*model)->layout().fingerprint();
      co.total_params = (*model)->layout().total();
      co.rank = w;
      co.push_encoding = encoding;
      co.topk_ratio = absl::GetFlag(FLAGS_topk_ratio);
      co.shared_memory = absl::GetFlag(FLAGS_shared_memory);
      co.shared_memory_slots =
          absl::GetFlag(FLAGS_overlap) || absl::GetFlag(FLAGS_async_push) ? 2 : 1;
      auto client = ps::GrpcParameterClient::Create(co);
      if (!client.ok()) {
        status[w] = client.status();
        return;
      }
      ps::TrainerOptions to;
      to.rank = w;
      to.batch_size = batch;
      to.steps = steps;
      to.clip_norm = clip_norm;
      to.schedule = ps::ScheduleRequest{absl::GetFlag(FLAGS_overlap),
                                        absl::GetFlag(FLAGS_async_push), push_pull, priority};
      to.priority_min_part = absl::GetFlag(FLAGS_priority_min_part);
      ps::Trainer trainer(to, **model, dev, **client, data, nullptr, nullptr, nullptr);
      std::atomic<bool> stop{false};
      status[w] = trainer.Run(stop);
      stats[w] = trainer.stats();
    });
  }
  for (auto& t : threads) t.join();
  for (auto& server : servers) server->Shutdown().IgnoreError();
  for (const absl::Status& s : status) RETURN_IF_ERROR(s);
  RunResult r;
  double total = 0, pull = 0, compute = 0, push = 0, longest = 0;
  int64_t samples = 0, steps_done = 0, push_bytes = 0, pull_bytes = 0;
  for (const ps::TrainStats& t : stats) {
    total += absl::ToDoubleSeconds(t.total);
    pull += absl::ToDoubleSeconds(t.pull);
    compute += absl::ToDoubleSeconds(t.compute);
    push += absl::ToDoubleSeconds(t.push);
    longest = std::max(longest, absl::ToDoubleSeconds(t.total));
    samples += t.samples;
    steps_done += t.steps;
    push_bytes += t.push_bytes;
    pull_bytes += t.pull_bytes;
  }
  // The trainer counts predictions; a text window makes one per token.
  r.samples_per_sec = static_cast<double>(samples) / data.shape().labels / longest;
  r.comm_share = (pull + push) / total;
  r.pull_share = pull / total;
  r.compute_share = compute / total;
  r.push_share = push / total;
  r.step_ms = 1000.0 * total / steps_done;
  r.push_bytes_per_step = push_bytes / steps_done;
  r.pull_bytes_per_step = pull_bytes / steps_done;
  return r;
}

// The value of `key` in the JSON line that `command` (a peer script) prints, or an error naming
// what is missing.
absl::StatusOr<double> PeerRate(const std::string& command, const std::string& key) {
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::UnavailableError(absl::StrCat("cannot run: ", command));
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), pipe) != nullptr) out += buf;
  const int rc = pclose(pipe);
  const std::string label = absl::StrCat("\"", key, "\": ");
  const size_t at = out.find(label);
  double rate = 0;
  if (rc != 0 || at == std::string::npos ||
      !absl::SimpleAtod(absl::StripAsciiWhitespace(out.substr(
                            at + label.size(), out.find_first_of(",}", at) - at - label.size())),
                        &rate)) {
    return absl::UnavailableError(absl::StrCat("'", command, "' failed (rc ", rc,
                                               "); install python3-torch (INSTALL_BENCH_PACKAGES=1 "
                                               "scripts/setup.sh) or pass --python"));
  }
  return rate;
}

// samples/s of bench/peers/pytorch_mlp.py (one process for 1 worker, DDP for more).
absl::StatusOr<double> PytorchMlpSamplesPerSec(int workers, int steps, int batch,
                                               const std::string& data_dir) {
  return PeerRate(absl::StrCat(absl::GetFlag(FLAGS_python), " ", absl::GetFlag(FLAGS_peers_dir),
                               "/pytorch_mlp.py --mode ", workers == 1 ? "single" : "ddp",
                               " --procs ", workers, " --steps ", steps, " --batch_size ", batch,
                               " --threads 1 --data_dir ", data_dir),
                  "samples_per_sec");
}

// samples/s (windows/s) of bench/peers/pytorch_gpt.py: the same model in one process and thread
// with the whole global batch, AdamW and clipping as the shards and workers here.
absl::StatusOr<double> PytorchGptSamplesPerSec(const ps::ModelSpec& spec, int context, int steps,
                                               int global_batch) {
  ASSIGN_OR_RETURN(
      const double tokens_per_sec,
      PeerRate(absl::StrCat(absl::GetFlag(FLAGS_python), " ", absl::GetFlag(FLAGS_peers_dir),
                            "/pytorch_gpt.py --train --data ", absl::GetFlag(FLAGS_text),
                            " --layers ", spec.layers, " --heads ", spec.heads, " --dim ", spec.dim,
                            " --context ", context, " --batch ", global_batch, " --steps ", steps),
               "tokens_per_sec"));
  return tokens_per_sec / context;
}

// A failure while measuring: exit 1.
int Fail(const absl::Status& s) {
  std::fprintf(stderr, "ps_bench_train: %s\n", s.ToString().c_str());
  return 1;
}

// Bad flags: exit 2, before anything is measured.
int Refuse(const absl::Status& s) {
  std::fprintf(stderr, "ps_bench_train: %s\n", s.ToString().c_str());
  return 2;
}

// What the list flags ask for, every item checked before the first measurement, so that a typo
// late in a list does not cost the runs before it.
struct Plan {
  std::vector<std::string> models;
  std::vector<std::pair<int, int>> configs;  // workers, shards
  std::vector<std::pair<std::string, ps::TensorEncoding>> encodings;
  std::vector<std::string> schedules;
};

absl::StatusOr<Plan> PlanFromFlags() {
  if (const auto mode = ps::ParseConsistencyMode(absl::GetFlag(FLAGS_mode)); !mode.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--mode: ", mode.status().message()));
  }
  Plan plan;
  for (const std::string& model : absl::GetFlag(FLAGS_models)) {
    if (model != "mlp" && model != "cnn" && model != "gpt") {
      return absl::InvalidArgumentError(
          absl::StrCat("--models: '", model, "' is not mlp, cnn or gpt"));
    }
    plan.models.push_back(model);
  }
  for (const std::string& config : absl::GetFlag(FLAGS_configs)) {
    std::vector<std::string> parts = absl::StrSplit(config, 'x');
    int workers = 0, shards = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &workers) ||
        !absl::SimpleAtoi(parts[1], &shards) || workers < 1 || shards < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--configs: '", config, "' is not WORKERSxSHARDS"));
    }
    plan.configs.emplace_back(workers, shards);
  }
  for (const std::string& name : absl::GetFlag(FLAGS_encodings)) {
    const absl::StatusOr<ps::TensorEncoding> encoding = ps::ParseTensorEncoding(name);
    if (!encoding.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--encodings: ", encoding.status().message()));
    }
    plan.encodings.emplace_back(name, *encoding);
  }
  for (const std::string& schedule : absl::GetFlag(FLAGS_schedules)) {
    if (schedule != "whole" && schedule != "priority") {
      return absl::InvalidArgumentError(
          absl::StrCat("--schedules: '", schedule, "' is neither whole nor priority"));
    }
    plan.schedules.push_back(schedule);
  }
  if (plan.models.empty() || plan.configs.empty() || plan.encodings.empty() ||
      plan.schedules.empty()) {
    return absl::InvalidArgumentError(
        "--models, --configs, --encodings and --schedules each need at least one item");
  }
  return plan;
}

}  // namespace

// The bench takes the workers' and shards' own flags (one definition each) but applies only
// some: the consistency mode and bound, the schedule's, top-k's ratio and shared memory. Any other
// of those groups set on the command line is refused, rather than silently measuring something
// else than asked.
absl::Status RefuseFlagsNotApplied() {
  const std::set<std::string> applied = {"mode",       "staleness",    "overlap",
                                         "async_push", "push_pull",    "priority_min_part",
                                         "topk_ratio", "shared_memory"};
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    const std::string file(flag->Filename());
    const bool shared = absl::EndsWith(file, "worker/worker_flags.cc") ||
                        absl::EndsWith(file, "server/server_flags.cc") ||
                        absl::EndsWith(file, "common/cli/cluster_flags.cc");
    if (shared && applied.count(std::string(name)) == 0 &&
        flag->CurrentValue() != flag->DefaultValue()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name, " is a worker's or shard's flag this bench does not apply (it takes --",
          absl::StrJoin(applied, ", --"), ")"));
    }
  }
  return absl::OkStatus();
}

int main(int argc, char** argv) {
  ps::TuneProcessForTensorTraffic();
  ps::ParseCommandLine(argc, argv,
                       "Training throughput of W workers and S shards on loopback.\n"
                       "  ps_bench_train [--models mlp,cnn] [--configs 1x1,2x2] "
                       "[--encodings f32,bf16] [--vs_pytorch]");
  spdlog::set_level(spdlog::level::warn);
  if (absl::Status refused = RefuseFlagsNotApplied(); !refused.ok()) return Refuse(refused);
  auto workload = ps::WorkloadFromFlags();
  if (!workload.ok()) return Refuse(workload.status());
  const absl::StatusOr<Plan> plan = PlanFromFlags();
  if (!plan.ok()) return Refuse(plan.status());
  if (workload->data.kind != "fashion-mnist") {
    return Refuse(absl::InvalidArgumentError(
        "the training bench measures Fashion-MNIST (mlp, cnn) and --text (gpt) only"));
  }
  const std::string data_dir =
      workload->data.path.empty() ? ps::kDefaultFashionMnistDir : workload->data.path;
  const int batch = workload->batch_size;
  // The workload's --steps: the MLP's training steps per worker per measurement (0: 200).
  const int mlp_steps = workload->steps > 0 ? static_cast<int>(workload->steps) : 200;
  if (batch < 1 || absl::GetFlag(FLAGS_cnn_steps) < 1 || absl::GetFlag(FLAGS_gpt_steps) < 1) {
    return Refuse(
        absl::InvalidArgumentError("--batch_size, --cnn_steps and --gpt_steps must be >= 1"));
  }
  // Each model's data, loaded once: images for the MLP and the CNN, the corpus for gpt.
  std::unique_ptr<ps::ImageDataset> images;
  std::unique_ptr<ps::TextDataset> text;
  for (const std::string& model_name : plan->models) {
    ps::ModelSpec spec = workload->model;
    spec.name = model_name;
    const bool gpt = model_name == "gpt";
    if (gpt && text == nullptr) {
      auto loaded = ps::TextDataset::Load(absl::GetFlag(FLAGS_text), true, workload->context);
      if (!loaded.ok()) return Fail(loaded.status());
      text = std::make_unique<ps::TextDataset>(*std::move(loaded));
    }
    if (!gpt && images == nullptr) {
      auto loaded = ps::LoadFashionMnist(data_dir, "train");
      if (!loaded.ok()) return Fail(loaded.status());
      images = std::make_unique<ps::ImageDataset>(*std::move(loaded));
    }
    const ps::Dataset& train = gpt ? static_cast<const ps::Dataset&>(*text) : *images;
    const int steps = model_name == "cnn" ? absl::GetFlag(FLAGS_cnn_steps)
                      : gpt               ? absl::GetFlag(FLAGS_gpt_steps)
                                          : mlp_steps;
    // The language model trains as bench/gpt_bench.sh and scripts/run.sh train it: AdamW,
    // decoupled decay 0.01, gradients clipped at norm 1. The others: SGD at 0.01.
    ps::OptimizerOptions oo;
    double clip_norm = 0;
    if (gpt) {
      oo.kind = ps::OptimizerKind::kAdamW;
      oo.lr = 0.001f;
      oo.weight_decay = 0.01f;
      clip_norm = 1.0;
    }
    ps::CpuDevice dev(1);
    auto model = ps::MakeModel(spec, train.shape(), dev, batch);
    if (!model.ok()) return Fail(model.status());
    auto local = LocalSamplesPerSec(**model, train, batch, steps, oo);
    if (!local.ok()) return Fail(local.status());
    for (const auto& [workers, shards] : plan->configs) {
      std::optional<double> theirs;  // PyTorch on this configuration, measured once
      for (const auto& [encoding_name, encoding] : plan->encodings) {
        std::optional<double> whole_rate;
        for (const std::string& schedule : plan->schedules) {
          std::vector<bool> push_pulls = {absl::GetFlag(FLAGS_push_pull)};
          if (absl::GetFlag(FLAGS_compare_push_pull)) push_pulls = {false, true};
          std::optional<double> separate_rate;
          absl::StatusOr<RunResult> r;
          for (const bool push_pull : push_pulls) {
            r = RunCluster(spec, train, workers, shards, steps, batch, oo, clip_norm, encoding,
                           schedule == "priority", push_pull);
            if (!r.ok()) return Fail(r.status());
            ps::JsonObject line;
            line.Add("bench", "train")
                .Add("model", model_name)
                .Add("params", (*model)->layout().total())
                .Add("workers", workers)
                .Add("shards", shards)
                .Add("mode", absl::GetFlag(FLAGS_mode))
                .Add("overlap", absl::GetFlag(FLAGS_overlap))
                .Add("async_push", absl::GetFlag(FLAGS_async_push))
                .Add("push_pull", push_pull)
                .Add("schedule", schedule)
                .Add("shared_memory", absl::GetFlag(FLAGS_shared_memory))
                .Add("push_encoding", encoding_name)
                .Add("batch_size", batch)
                .Add("steps", steps)
                .Add("samples_per_sec", r->samples_per_sec)
                .Add("comm_wait_share", r->comm_share)
                .Add("pull_share", r->pull_share)
                .Add("compute_share", r->compute_share)
                .Add("push_share", r->push_share)
                .Add("step_ms", r->step_ms)
                .Add("push_bytes_per_step", r->push_bytes_per_step)
                .Add("pull_bytes_per_step", r->pull_bytes_per_step)
                .Add("local_samples_per_sec", *local)
                .Add("ratio_vs_local", r->samples_per_sec / *local);
            if (gpt) line.Add("tokens_per_sec", r->samples_per_sec * train.shape().labels);
            if (schedule == "whole") whole_rate = r->samples_per_sec;
            if (schedule == "priority" && whole_rate.has_value()) {
              line.Add("ratio_vs_whole", r->samples_per_sec / *whole_rate);
            }
            if (!push_pull) separate_rate = r->samples_per_sec;
            if (push_pull && separate_rate.has_value()) {
              line.Add("ratio_vs_separate", r->samples_per_sec / *separate_rate);
            }
            std::printf("%s\n", line.str().c_str());
            std::fflush(stdout);
          }
          if (absl::GetFlag(FLAGS_vs_pytorch) && model_name != "cnn" &&
              encoding == ps::TensorEncoding::kF32) {
            if (!theirs.has_value()) {
              auto rate =
                  gpt ? PytorchGptSamplesPerSec(spec, workload->context, steps, batch * workers)
                      : PytorchMlpSamplesPerSec(workers, steps, batch, data_dir);
              if (!rate.ok()) return Fail(rate.status());
              theirs = *rate;
            }
            ps::JsonObject vs;
            vs.Add("bench", "train_vs_pytorch")
                .Add("model", model_name)
                .Add("workers", workers)
                .Add("shards", shards)
                .Add("schedule", schedule)
                .Add("shared_memory", absl::GetFlag(FLAGS_shared_memory))
                .Add("samples_per_sec", r->samples_per_sec)
                .Add("pytorch_mode", gpt            ? "single_global_batch"
                                     : workers == 1 ? "single"
                                                    : "ddp_gloo")
                .Add("pytorch_samples_per_sec", *theirs)
                .Add("ratio_vs_pytorch", r->samples_per_sec / *theirs);
            std::printf("%s\n", vs.str().c_str());
            std::fflush(stdout);
          }
        }
      }
    }
  }
  return 0;
}
