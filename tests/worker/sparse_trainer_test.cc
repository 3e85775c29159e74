// Workers training DLRM on click logs through shards with a sparse table (in process): BSP with
// W workers of batch b moves the weights and rows as one worker of batch W x b does, training
// learns the planted click model, the double-buffered schedules carry rows as the sequential
// ones do, and priority scheduling, which cannot carry them, is refused.

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/data/ctr_dataset.h"
#include "common/data/ctr_generator.h"
#include "common/device/cpu_device.h"
#include "common/nn/model_registry.h"
#include "common/nn/sparse_lookup.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "tests/support/in_process_client.h"
#include "tests/support/test_shards.h"
#include "worker/step_gradient.h"
#include "worker/trainer.h"

namespace ps {
namespace {

// Planted click data, written once per test process and read back.
const CtrDataset& Clicks(const std::string& split) {
  static const auto* data = [] {
    const std::string dir = testing::TempDir() + "/sparse_trainer_" + std::to_string(getpid());
    std::filesystem::create_directories(dir);
    const PlantedCtrModel planted(11);
    EXPECT_TRUE(WriteCtrSplit(planted, 11, 0, 20000, dir + "/train.tsv").ok());
    EXPECT_TRUE(WriteCtrSplit(planted, 11, 1, 4000, dir + "/test.tsv").ok());
    auto* both = new std::pair<CtrDataset, CtrDataset>(*LoadCriteo(dir, "train", {}),
                                                       *LoadCriteo(dir, "test", {}));
    std::filesystem::remove_all(dir);
    return both;
  }();
  return split == "train" ? data->first : data->second;
}

// The click rate of the test split.
double ClickRate() {
  const CtrDataset& test = Clicks("test");
  std::vector<int32_t> all(test.size()), labels(test.size());
  for (int32_t i = 0; i < test.size(); ++i) all[i] = i;
  std::vector<float> x(test.size() * kCtrDenseFields);
  test.Gather(all.data(), static_cast<int>(test.size()), x.data(), labels.data());
  double clicks = 0;
  for (int32_t y : labels) clicks += y;
  return clicks / static_cast<double>(test.size());
}

struct SparseCluster {
  std::vector<std::unique_ptr<Shard>> shards;
  std::vector<Shard*> pointers() const {
    std::vector<Shard*> p;
    for (const auto& s : shards) p.push_back(s.get());
    return p;
  }
};

SparseCluster StartShards(int shards, int workers, ConsistencyMode mode,
                          SparseOptimizerKind sparse = SparseOptimizerKind::kSgd) {
  SparseCluster c;
  for (int s = 0; s < shards; ++s) {
    ShardOptions o = SgdShard(mode, workers, s, shards);
    o.optimizer.lr = 0.05f;
    o.sparse_optimizer = {sparse, 0.05f};
    o.lease = absl::Seconds(60);
    c.shards.push_back(*Shard::Create(o));
  }
  return c;
}

struct SparseRun {
  int workers = 1;
  int batch = 16;
  int epochs = 1;
  int64_t train_limit = 0;
  ScheduleRequest schedule;
  FaultSwitches* faults = nullptr;  // for every worker's client
};

std::unique_ptr<Model> Dlrm(Device& dev, int max_batch) {
  auto model = MakeModel(ModelSpec{"dlrm", {16}, 4}, Clicks("train").shape(), dev, max_batch);
  EXPECT_TRUE(model.ok()) << model.status();
  return std::move(*model);
}

// Trains every worker of `run` to the end on the cluster; the first error, if any.
absl::Status Train(SparseCluster& c, const SparseRun& run) {
  CtrDataset train = Clicks("train");
  train.Truncate(run.train_limit);
  std::vector<absl::Status> status(run.workers);
  std::vector<std::thread> threads;
  for (int r = 0; r < run.workers; ++r) {
    threads.emplace_back([&, r] {
      CpuDevice dev;
      std::unique_ptr<Model> model = Dlrm(dev, 256);
      InProcessClient client(c.pointers(), model->description().fingerprint(),
                             model->layout().total(), /*incarnation=*/10 + r, run.faults);
      client.set_tables(model->description().sparse());
      TrainerOptions o;
      o.rank = r;
      o.batch_size = run.batch;
      o.epochs = run.epochs;
      o.seed = 3;
      o.schedule = run.schedule;
      Trainer trainer(o, *model, dev, client, train, nullptr, nullptr, nullptr);
      std::atomic<bool> stop{false};
      status[r] = trainer.Run(stop);
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : status) RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

// The shards' dense weights, then the rows of every key of the first `samples` training samples.
std::vector<float> Everything(SparseCluster& c, int64_t samples) {
  CpuDevice dev;
  std::unique_ptr<Model> model = Dlrm(dev, 4);
  InProcessClient client(c.pointers(), model->description().fingerprint(), model->layout().total());
  client.set_tables(model->description().sparse());
  std::vector<int32_t> all(samples);
  for (int32_t i = 0; i < samples; ++i) all[i] = i;
  std::vector<uint64_t> keys(samples * kCtrCategoricalFields);
  Clicks("train").GatherKeys(all.data(), static_cast<int>(samples), keys.data());
  const SparseLookups s = DeduplicateKeys(keys.data(), static_cast<int64_t>(keys.size()));
  std::vector<float> dense(model->layout().total()), rows(s.unique_keys.size() * 4);
  const RowsToPull asked{0, s.unique_keys, absl::MakeSpan(rows)};
  EXPECT_TRUE(client.PullWithRows(0, /*no_wait=*/true, absl::MakeSpan(dense), {&asked, 1}).ok());
  dense.insert(dense.end(), rows.begin(), rows.end());
  return dense;
}

// The initial rows of the keys Everything() lists, in its order.
std::vector<float> InitialRows(int64_t samples) {
  std::vector<int32_t> all(samples);
  for (int32_t i = 0; i < samples; ++i) all[i] = i;
  std::vector<uint64_t> keys(samples * kCtrCategoricalFields);
  Clicks("train").GatherKeys(all.data(), static_cast<int>(samples), keys.data());
  const SparseLookups s = DeduplicateKeys(keys.data(), static_cast<int64_t>(keys.size()));
  std::vector<float> rows(s.unique_keys.size() * 4);
  for (size_t u = 0; u < s.unique_keys.size(); ++u) {
    SparseTable::InitialRow(SparseTableSpec{"embeddings", 4, 0.05f}, s.unique_keys[u],
                            rows.data() + u * 4);
  }
  return rows;
}

TEST(SparseTrainer, BspWithTwoWorkersMovesAsOneWorkerOfTheirJointBatch) {
  const SparseRun two{2, 8, 1, 1600, {}};
  const SparseRun one{1, 16, 1, 1600, {}};
  SparseCluster a = StartShards(2, 2, ConsistencyMode::kBsp);
  ASSERT_TRUE(Train(a, two).ok());
  SparseCluster b = StartShards(2, 1, ConsistencyMode::kBsp);
  ASSERT_TRUE(Train(b, one).ok());
  EXPECT_EQ(a.shards[0]->GetStatus().version, 100);  // 1600 / 16 steps
  const std::vector<float> x = Everything(a, 1600), y = Everything(b, 1600);
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(x[i], y[i], 1e-5f * (1 + std::abs(y[i]))) << i;
  }
  // The rows did train: nearly all rows the data touched moved from their initial values.
  const std::vector<float> initial = InitialRows(1600);
  const size_t dense = x.size() - initial.size();
  int64_t moved = 0;
  for (size_t i = 0; i < initial.size(); ++i) moved += x[dense + i] != initial[i];
  EXPECT_GT(moved, static_cast<int64_t>(initial.size()) * 9 / 10);
  EXPECT_GT(a.shards[0]->TableStatuses()[0].rows + a.shards[1]->TableStatuses()[0].rows, 1000);
}

TEST(SparseTrainer, LearnsThePlantedClicks) {
  SparseCluster c = StartShards(2, 2, ConsistencyMode::kBsp, SparseOptimizerKind::kAdagrad);
  ASSERT_TRUE(Train(c, SparseRun{2, 32, 1, 0, {}}).ok());
  CpuDevice dev;
  std::unique_ptr<Model> model = Dlrm(dev, 256);
  InProcessClient client(c.pointers(), model->description().fingerprint(), model->layout().total());
  client.set_tables(model->description().sparse());
  std::vector<float> dense(model->layout().total()), scratch(dense.size());
  ASSERT_TRUE(client.Pull(0, /*no_wait=*/true, absl::MakeSpan(dense)).ok());
  const RowSource rows = [&](absl::Span<const uint64_t> keys, absl::Span<float> values) {
    const RowsToPull asked{0, keys, values};
    return client.PullWithRows(0, true, absl::MakeSpan(scratch), {&asked, 1}).status();
  };
  auto stats = EvaluateDataset(*model, dev, dense.data(), Clicks("test"), rows);
  ASSERT_TRUE(stats.ok()) << stats.status();
  std::printf("test AUC %.4f, log-loss %.4f after one epoch of 20000 samples\n", stats->auc,
              stats->loss_sum / stats->count);
  // Better than chance, and better than predicting the click rate for every sample (the
  // entropy of the labels), which is what a model that learned nothing of the features gives.
  const double rate = ClickRate();
  const double entropy = -(rate * std::log(rate) + (1 - rate) * std::log(1 - rate));
  EXPECT_GT(stats->auc, 0.6);
  EXPECT_LT(stats->loss_sum / stats->count, entropy - 0.01);
  EXPECT_EQ(model->description().sparse().size(), 1u);
}

// A worker that registers again may go back to an earlier step while later steps' keys are
// cached: the keys of the step being run must stay put while the next step's are computed.
TEST(SparseTrainer, StepKeysStayValidWhenTheWorkerGoesBack) {
  CpuDevice dev;
  std::unique_ptr<Model> model = Dlrm(dev, 64);
  BatchPlanOptions plan;
  plan.dataset_size = Clicks("train").size();
  plan.batch_size = 16;
  auto gradient = StepGradient::Create(*model, dev, Clicks("train"), plan);
  ASSERT_TRUE(gradient.ok()) << gradient.status();
  (*gradient)->StepKeys(5);
  (*gradient)->StepKeys(6);
  const std::vector<uint64_t>& resumed = (*gradient)->StepKeys(2);  // back, after a restart
  const std::vector<uint64_t> copy = resumed;
  (*gradient)->StepKeys(3);  // the next step's pull
  EXPECT_EQ(resumed, copy);
  EXPECT_NE((*gradient)->StepKeys(3), copy);
}

// SSP with s = 0 and one worker: a prefetched pull of step c+1 (--overlap), or the pull that
// follows an asynchronous push (--async_push), waits on the shard for this worker's push of step
// c, rows included. The double-buffered schedules, which carry each step's keys and rows in
// their own buffers, then give the dense weights and every row of the sequential steps, bit for
// bit.
TEST(SparseTrainer, OverlapAndAsyncPushUnderSspZeroGiveTheSameRowsAndWeights) {
  const SparseRun plain{1, 16, 1, 800, {}};
  SparseCluster reference = StartShards(2, 1, ConsistencyMode::kSsp);
  ASSERT_TRUE(Train(reference, plain).ok());
  const std::vector<float> expected = Everything(reference, 800);
  for (const auto& [overlap, async_push] : {std::pair{true, false}, {false, true}, {true, true}}) {
    SCOPED_TRACE(absl::StrCat("overlap ", overlap, ", async push ", async_push));
    SparseRun run = plain;
    run.schedule.overlap = overlap;
    run.schedule.async_push = async_push;
    SparseCluster c = StartShards(2, 1, ConsistencyMode::kSsp);
    ASSERT_TRUE(Train(c, run).ok());
    EXPECT_EQ(c.shards[1]->GetStatus().version, 50);  // 800 / 16 steps
    EXPECT_EQ(Everything(c, 800), expected);
  }
}

// Faults on a chosen call with the prefetch and the asynchronous push. A lost push reply (the push,
// rows included, goes again and is answered as a duplicate), under SSP(0): the same bits as the
// undisturbed run. An ABORTED answer (the worker registers again, drops what its buffers carried
// and resumes at the shards' clock), under ASP: every step's dense gradient and rows land once.
// (Under SSP the injected answer would leave the next pull waiting for a push the shards never saw;
// a real ABORTED comes from a shard that also answers that pull.)
TEST(SparseTrainer, TheOverlappingSchedulesSurviveALostReplyAndAnAbortedCall) {
  SparseRun run{1, 16, 1, 800, {}};
  SparseCluster reference = StartShards(2, 1, ConsistencyMode::kSsp);
  ASSERT_TRUE(Train(reference, run).ok());
  const std::vector<float> expected = Everything(reference, 800);
  run.schedule.overlap = true;
  run.schedule.async_push = true;
  for (int call : {2, 9, 30}) {
    FaultSwitches lost;
    lost.drop_push_reply = call;
    run.faults = &lost;
    SparseCluster l = StartShards(2, 1, ConsistencyMode::kSsp);
    ASSERT_TRUE(Train(l, run).ok()) << "lost reply " << call;
    EXPECT_EQ(l.shards[0]->GetStatus().pushes_duplicate, 1) << "lost reply " << call;
    EXPECT_EQ(Everything(l, 800), expected) << "lost reply " << call;
    FaultSwitches aborted;
    aborted.abort_call = call;
    run.faults = &aborted;
    SparseCluster a = StartShards(2, 1, ConsistencyMode::kAsp);
    ASSERT_TRUE(Train(a, run).ok()) << "abort " << call;
    for (const auto& shard : a.shards) {
      const ShardStatus status = shard->GetStatus();
      EXPECT_EQ(status.version, 50) << "abort " << call;
      EXPECT_EQ(status.workers[0].clock, 50) << "abort " << call;
      EXPECT_EQ(status.pushes_duplicate, 0) << "abort " << call;
    }
  }
}

// ASP with the pipeline (one PushPull per step pushes step c with its rows and pulls step c+2's
// weights and rows): every step lands once, no gradient misses more than this worker's own
// previous one, the rows train, and the model learns the planted clicks as whole steps do.
TEST(SparseTrainer, ThePipelineCarriesRowsUnderAsp) {
  SparseCluster c = StartShards(2, 1, ConsistencyMode::kAsp);
  SparseRun run{1, 16, 1, 1600, {}};
  run.schedule.overlap = true;
  run.schedule.async_push = true;
  ASSERT_TRUE(Train(c, run).ok());
  for (const auto& shard : c.shards) {
    const ShardStatus status = shard->GetStatus();
    EXPECT_EQ(status.version, 100);
    EXPECT_EQ(status.pushes_duplicate, 0);
    EXPECT_LE(status.workers[0].staleness.max(), 1);
  }
  const std::vector<float> x = Everything(c, 1600);
  const std::vector<float> initial = InitialRows(1600);
  const size_t dense = x.size() - initial.size();
  int64_t moved = 0;
  for (size_t i = 0; i < initial.size(); ++i) moved += x[dense + i] != initial[i];
  EXPECT_GT(moved, static_cast<int64_t>(initial.size()) * 9 / 10);
}

TEST(SparseTrainer, PriorityCannotCarryRowsAndIsRefused) {
  SparseCluster c = StartShards(1, 1, ConsistencyMode::kAsp);
  SparseRun run{1, 16, 1, 160, {}};
  run.schedule.priority = true;
  const absl::Status s = Train(c, run);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(c.shards[0]->GetStatus().version, 0);
}

}  // namespace
}  // namespace ps
