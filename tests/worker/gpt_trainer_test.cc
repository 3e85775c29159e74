// Workers training the gpt model on text windows through shards (in process): BSP with W workers
// of batch b moves the weights as one worker of batch W x b, the loss falls, and gradient
// clipping refuses the schedule that pushes layers before the norm is known.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "common/data/text_dataset.h"
#include "common/device/cpu_device.h"
#include "common/nn/model_registry.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "tests/support/in_process_client.h"
#include "worker/text_generation.h"
#include "worker/trainer.h"

namespace ps {
namespace {

constexpr int kContext = 8;

// A small corpus with structure to learn (words from a short list), written once.
const TextDataset& Corpus() {
  static const TextDataset* data = [] {
    const std::string path =
        testing::TempDir() + "/gpt_trainer_" + std::to_string(getpid()) + ".txt";
    const char* words[] = {"the ", "king ", "said ", "unto ", "them, ", "and ", "lo. "};
    Rng rng(5);
    std::string text;
    while (text.size() < 6000) text += words[rng.Below(7)];
    std::ofstream(path) << text;
    auto loaded = TextDataset::Load(path, /*train=*/true, kContext);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    std::filesystem::remove(path);
    return new TextDataset(*std::move(loaded));
  }();
  return *data;
}

std::unique_ptr<Model> Gpt(Device& dev, int max_batch) {
  ModelSpec spec;
  spec.name = "gpt";
  spec.layers = 1;
  spec.heads = 2;
  spec.dim = 8;
  auto model = MakeModel(spec, Corpus().shape(), dev, max_batch);
  EXPECT_TRUE(model.ok()) << model.status();
  return std::move(*model);
}

// Adam's steps are about lr in size whatever the gradient's, so it turns rounding differences in
// near-zero gradient elements into whole steps: the equality of BSP W x b and 1 x Wb is checked
// with SGD, the transformer's own optimizer elsewhere.
std::vector<std::unique_ptr<Shard>> StartShards(int workers,
                                                OptimizerKind kind = OptimizerKind::kAdamW) {
  std::vector<std::unique_ptr<Shard>> shards;
  for (int s = 0; s < 2; ++s) {
    ShardOptions o;
    o.shard_id = s;
    o.num_shards = 2;
    o.consistency.mode = ConsistencyMode::kBsp;
    o.consistency.num_workers = workers;
    o.optimizer.kind = kind;
    o.optimizer.lr = kind == OptimizerKind::kSgd ? 0.5f : 0.01f;
    o.optimizer.weight_decay = 0.01f;
    o.lease = absl::Seconds(60);
    shards.push_back(*Shard::Create(o));
  }
  return shards;
}

// Trains `workers` workers of `batch` windows for `steps` steps; the first error, if any.
absl::Status Train(std::vector<std::unique_ptr<Shard>>& shards, int workers, int batch,
                   int64_t steps, double clip_norm = 0, ScheduleRequest schedule = {}) {
  std::vector<Shard*> pointers;
  for (auto& s : shards) pointers.push_back(s.get());
  std::vector<absl::Status> status(workers);
  std::vector<std::thread> threads;
  for (int r = 0; r < workers; ++r) {
    threads.emplace_back([&, r] {
      CpuDevice dev;
      std::unique_ptr<Model> model = Gpt(dev, batch);
      InProcessClient client(pointers, model->description().fingerprint(), model->layout().total(),
                             /*incarnation=*/20 + r);
      TrainerOptions o;
      o.rank = r;
      o.batch_size = batch;
      o.steps = steps;
      o.seed = 9;
      o.clip_norm = clip_norm;
      o.schedule = schedule;
      Trainer trainer(o, *model, dev, client, Corpus(), nullptr, nullptr, nullptr);
      std::atomic<bool> stop{false};
      status[r] = trainer.Run(stop);
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : status) RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

std::vector<float> Weights(std::vector<std::unique_ptr<Shard>>& shards) {
  std::vector<float> all;
  for (auto& s : shards) {
    const std::vector<float> part = s->Values();
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

double MeanLoss(const std::vector<float>& weights) {
  CpuDevice dev;
  std::unique_ptr<Model> model = Gpt(dev, 64);
  std::vector<int32_t> idx(64), labels(64 * kContext);
  for (int i = 0; i < 64; ++i) idx[i] = i * 50;
  std::vector<float> x(64 * kContext);
  Corpus().Gather(idx.data(), 64, x.data(), labels.data());
  auto s = model->Evaluate(weights.data(), x.data(), labels.data(), 64);
  EXPECT_TRUE(s.ok());
  return s->loss_sum / s->count;
}

TEST(GptTrainer, BspWithTwoWorkersMovesAsOneWorkerOfTheirJointBatch) {
  auto two = StartShards(2, OptimizerKind::kSgd);
  ASSERT_TRUE(Train(two, 2, 3, 30).ok());
  auto one = StartShards(1, OptimizerKind::kSgd);
  ASSERT_TRUE(Train(one, 1, 6, 30).ok());
  EXPECT_EQ(two[0]->GetStatus().version, 30);
  const std::vector<float> a = Weights(two), b = Weights(one);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5f * (1 + std::abs(b[i]))) << i;
  // And it learned: the loss fell from the initial weights' (about ln of the vocabulary).
  auto adamw = StartShards(1);
  ASSERT_TRUE(Train(adamw, 1, 6, 30).ok());
  CpuDevice dev;
  std::unique_ptr<Model> model = Gpt(dev, 1);
  std::vector<float> initial(model->layout().total());
  model->InitParams(9, initial.data());
  EXPECT_LT(MeanLoss(a), MeanLoss(initial) - 0.3);
  EXPECT_LT(MeanLoss(Weights(adamw)), MeanLoss(initial) - 0.5);
}

TEST(GptTrainer, ClippingBoundsEachStepAndRefusesPriorityScheduling) {
  auto clipped = StartShards(1);
  ASSERT_TRUE(Train(clipped, 1, 6, 10, /*clip_norm=*/0.05).ok());
  auto free = StartShards(1);
  ASSERT_TRUE(Train(free, 1, 6, 10).ok());
  EXPECT_NE(Weights(clipped), Weights(free));
  auto refused = StartShards(1);
  ScheduleRequest priority;
  priority.priority = true;
  EXPECT_EQ(Train(refused, 1, 6, 10, 1.0, priority).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TextGeneration, SamplesReproduciblyAndTheColdestDrawIsTheArgMax) {
  CpuDevice dev;
  std::unique_ptr<Model> model = Gpt(dev, 1);
  std::vector<float> params(model->layout().total());
  model->InitParams(4, params.data());  // nearly uniform logits: every draw counts
  auto prompt = Corpus().Encode("the king");
  ASSERT_TRUE(prompt.ok());
  GenerationOptions o;
  o.tokens = 3 * kContext;  // past the window: the model reads the last kContext tokens
  o.temperature = 1.0;
  o.seed = 7;
  auto a = GenerateTokens(*model, dev, params.data(), *prompt, o);
  auto b = GenerateTokens(*model, dev, params.data(), *prompt, o);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(a->size(), static_cast<size_t>(3 * kContext));
  o.seed = 8;
  EXPECT_NE(*GenerateTokens(*model, dev, params.data(), *prompt, o), *a);
  // Temperature 0: each token is the argmax of the logits at the window's last position.
  for (float& p : params) p *= 20.0f;  // sharp logits: the argmax is well separated
  o.temperature = 0;
  o.tokens = 2;
  auto cold = GenerateTokens(*model, dev, params.data(), *prompt, o);
  ASSERT_TRUE(cold.ok());
  std::vector<float> x(kContext, 0.0f);
  for (int t = 0; t < kContext; ++t) x[t] = static_cast<float>((*prompt)[t]);  // "the king" is 8
  std::vector<int32_t> labels(kContext, 0);
  ASSERT_TRUE(model->Evaluate(params.data(), x.data(), labels.data(), 1).ok());
  const float* last = model->logits() + (kContext - 1) * model->num_classes();
  EXPECT_EQ((*cold)[0], std::max_element(last, last + model->num_classes()) - last);
  EXPECT_EQ(GenerateTokens(*model, dev, params.data(), {}, o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
