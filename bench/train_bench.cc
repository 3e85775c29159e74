// ps_bench_train: training throughput of one worker against one shard over loopback gRPC (both
// in this process, real TCP between them), on Fashion-MNIST with the MLP. Prints one JSON line
// with samples/s and the shares of step time spent in pull, compute and push, and the ratio to
// a reference measured in the same run by the same binary: the same model trained locally with
// the same batches and no parameter server (compute plus an in-place SGD update).
//
//   ps_bench_train [--steps 300] [--batch_size 32] [--hidden 256,128] [--data_dir ...]

#include <atomic>
#include <cstdio>
#include <numeric>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/cli.h"
#include "common/cpu_device.h"
#include "common/dataset.h"
#include "common/json_lines.h"
#include "common/model.h"
#include "common/optimizer.h"
#include "server/shard_server.h"
#include "spdlog/spdlog.h"
#include "worker/batch_plan.h"
#include "worker/grpc_parameter_client.h"
#include "worker/trainer.h"

ABSL_FLAG(int32_t, steps, 300, "Training steps per measurement.");
ABSL_FLAG(int32_t, batch_size, 32, "Samples per step.");
ABSL_FLAG(std::string, hidden, "256,128", "MLP hidden widths.");
ABSL_FLAG(std::string, data_dir, ps::kDefaultFashionMnistDir, "Fashion-MNIST folder.");

namespace {

// The local reference: the same batches through the same model (CPU device, so host memory is
// device memory), SGD applied in place.
absl::StatusOr<double> LocalSamplesPerSec(ps::Model& model, const ps::Dataset& train, int batch,
                                          int steps) {
  const int64_t n = model.layout().total();
  std::vector<float> params(n), grads(n);
  model.InitParams(1, params.data());
  ps::OptimizerOptions oo;
  ps::Optimizer sgd(oo, n);
  ps::BatchPlanOptions po;
  po.dataset_size = train.size();
  po.batch_size = batch;
  auto plan = ps::BatchPlan::Create(po);
  if (!plan.ok()) return plan.status();
  std::vector<float> x(static_cast<size_t>(batch) * train.features());
  std::vector<int32_t> y(batch), idx;
  const absl::Time start = absl::Now();
  for (int s = 0; s < steps; ++s) {
    plan->MicroBatch(s, 0, &idx);
    train.Gather(idx.data(), batch, x.data(), y.data());
    std::fill(grads.begin(), grads.end(), 0.0f);
    auto st = model.ForwardBackward(params.data(), x.data(), y.data(), batch, 1.0f, grads.data());
    if (!st.ok()) return st.status();
    sgd.Apply(s, grads, absl::MakeSpan(params));
  }
  return static_cast<double>(steps) * batch / absl::ToDoubleSeconds(absl::Now() - start);
}

}  // namespace

int main(int argc, char** argv) {
  ps::ParseCommandLine(argc, argv, "Training throughput of 1 worker and 1 shard (MLP).");
  spdlog::set_level(spdlog::level::warn);
  const int batch = absl::GetFlag(FLAGS_batch_size);
  const int steps = absl::GetFlag(FLAGS_steps);
  ps::ModelSpec spec;
  spec.hidden.clear();
  for (absl::string_view p : absl::StrSplit(absl::GetFlag(FLAGS_hidden), ',')) {
    int64_t w = 0;
    if (!absl::SimpleAtoi(p, &w) || w <= 0) {
      std::fprintf(stderr, "bad --hidden\n");
      return 2;
    }
    spec.hidden.push_back(w);
  }
  auto train = ps::LoadFashionMnist(absl::GetFlag(FLAGS_data_dir), "train");
  if (!train.ok()) {
    std::fprintf(stderr, "%s\n", train.status().ToString().c_str());
    return 1;
  }
  ps::CpuDevice dev;
  auto model = ps::MakeModel(spec, ps::ImageShape{train->rows, train->cols, 1}, train->num_classes,
                             dev, batch);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 2;
  }
  train->Truncate(int64_t{steps} * batch);

  auto local = LocalSamplesPerSec(**model, *train, batch, steps);
  if (!local.ok()) {
    std::fprintf(stderr, "%s\n", local.status().ToString().c_str());
    return 1;
  }

  ps::ShardServerOptions so;
  so.shard.consistency.mode = ps::ConsistencyMode::kBsp;
  so.shard.optimizer.lr = 0.01f;
  auto server = ps::ShardServer::Start(so);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  ps::GrpcClientOptions co;
  co.servers = {"127.0.0.1:" + std::to_string((*server)->port())};
  co.fingerprint = (*model)->layout().fingerprint();
  co.total_params = (*model)->layout().total();
  auto client = ps::GrpcParameterClient::Create(co);
  ps::TrainerOptions to;
  to.batch_size = batch;
  to.epochs = 1;
  ps::Trainer trainer(to, **model, dev, **client, *train, nullptr, nullptr, nullptr);
  std::atomic<bool> stop{false};
  absl::Status s = trainer.Run(stop);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  const ps::TrainStats& t = trainer.stats();
  const double total = absl::ToDoubleSeconds(t.total);
  const double ps_rate = t.samples / total;
  ps::JsonObject line;
  line.Add("bench", "train")
      .Add("model", "mlp")
      .Add("params", (*model)->layout().total())
      .Add("workers", 1)
      .Add("shards", 1)
      .Add("batch_size", batch)
      .Add("steps", t.steps)
      .Add("samples_per_sec", ps_rate)
      .Add("pull_share", absl::ToDoubleSeconds(t.pull) / total)
      .Add("compute_share", absl::ToDoubleSeconds(t.compute) / total)
      .Add("push_share", absl::ToDoubleSeconds(t.push) / total)
      .Add("step_ms", 1000.0 * total / t.steps)
      .Add("local_samples_per_sec", *local)
      .Add("ratio_vs_local", ps_rate / *local);
  std::printf("%s\n", line.str().c_str());
  (*server)->Shutdown().IgnoreError();
  return 0;
}
