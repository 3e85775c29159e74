// The trainer against in-process shards over gRPC, on a small synthetic data set.

#include "worker/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "common/base/random.h"
#include "common/device/cpu_device.h"
#include "common/nn/model_registry.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/shard_server.h"
#include "tests/common/device/deferred_copy_device.h"
#include "tests/support/in_process_client.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/test_shards.h"
#include "worker/grpc_parameter_client.h"
#include "worker/work_account.h"

namespace ps {
namespace {

// 4x4 "images" whose label is the brightest quadrant: learnable by a small MLP.
ImageDataset SyntheticData(int n, uint64_t seed) {
  ImageDataset d;
  d.rows = 4;
  d.cols = 4;
  d.num_classes = 4;
  Rng rng(seed);
  for (int i = 0; i < n; ++i) {
    const int label = static_cast<int>(rng.Below(4));
    for (int p = 0; p < 16; ++p) {
      const int quadrant = (p / 8) * 2 + (p % 4) / 2;
      d.pixels.push_back(
          static_cast<uint8_t>(quadrant == label ? 200 + rng.Below(56) : rng.Below(100)));
    }
    d.labels.push_back(label);
  }
  return d;
}

struct Cluster {
  std::vector<std::unique_ptr<ShardServer>> servers;
  std::vector<std::string> addresses;
};

Cluster StartCluster(int shards, int workers, ConsistencyMode mode, int staleness = 0,
                     absl::Duration lease = ShardOptions().lease) {
  Cluster c;
  for (int s = 0; s < shards; ++s) {
    ShardServerOptions o = SgdShardServer(mode, workers, s, shards);
    o.shard.consistency.staleness = staleness;
    o.shard.lease = lease;
    o.shard.optimizer.lr = 0.1f;
    c.servers.push_back(StartShardServer(o));
    if (c.servers.back() == nullptr) return c;
    c.addresses.push_back(LoopbackAddress(c.servers.back()->port()));
  }
  return c;
}

// The calls a trainer made, passed on to the real client. The PushPull numbered
// `abort_push_pull` (1-based; 0: none) is answered ABORTED without reaching the shards, as after
// a shard restart; the Push numbered `refuse_push` INVALID_ARGUMENT, as a non-finite gradient.
// `pull_deadlines` counts the pulls that ran out their deadline.
struct CallCounts {
  std::atomic<int> pulls{0}, pushes{0}, push_pulls{0}, pull_deadlines{0};
  int abort_push_pull = 0;
  int refuse_push = 0;
};
class CountingClient final : public ParameterClient {
 public:
  CountingClient(ParameterClient& inner, CallCounts& counts) : inner_(inner), counts_(counts) {}
  TransportBuffers TakeTransportBuffers(int set) override {
    return inner_.TakeTransportBuffers(set);
  }
  absl::StatusOr<ClusterInfo> Register(int rank, absl::Duration timeout) override {
    return inner_.Register(rank, timeout);
  }
  absl::Status Heartbeat() override { return inner_.Heartbeat(); }
  absl::Status Leave() override { return inner_.Leave(); }
  void SetWorkPlan(int64_t steps, int64_t samples_per_step) override {
    inner_.SetWorkPlan(steps, samples_per_step);
  }
  absl::Status Init(absl::Span<const float> params) override { return inner_.Init(params); }
  absl::StatusOr<PullStats> Pull(int64_t clock, bool no_wait, absl::Span<float> params) override {
    ++counts_.pulls;
    absl::StatusOr<PullStats> pulled = inner_.Pull(clock, no_wait, params);
    if (absl::IsDeadlineExceeded(pulled.status())) ++counts_.pull_deadlines;
    return pulled;
  }
  absl::StatusOr<PushStats> Push(int64_t clock, const std::vector<int64_t>& base_versions,
                                 int num_samples, absl::Span<const float> gradient) override {
    if (++counts_.pushes == counts_.refuse_push) {
      return absl::InvalidArgumentError("injected: the gradient contains NaN or Inf");
    }
    return inner_.Push(clock, base_versions, num_samples, gradient);
  }
  absl::StatusOr<PushPullStats> PushPull(int64_t clock, const std::vector<int64_t>& base_versions,
                                         int num_samples, absl::Span<const float> gradient,
                                         int64_t pull_clock, absl::Span<float> params) override {
    if (++counts_.push_pulls == counts_.abort_push_pull) {
      return absl::AbortedError("injected: register again");
    }
    return inner_.PushPull(clock, base_versions, num_samples, gradient, pull_clock, params);
  }
  absl::StatusOr<PullStats> PullParts(int64_t clock, absl::Span<const KeyRange> parts,
                                      absl::Span<float> params,
                                      const std::function<void(size_t)>& on_part) override {
    return inner_.PullParts(clock, parts, params, on_part);
  }
  absl::StatusOr<PushStats> PushParts(int64_t clock, const std::vector<int64_t>& base_versions,
                                      int num_samples, absl::Span<const float> gradient,
                                      absl::Span<const KeyRange> parts) override {
    return inner_.PushParts(clock, base_versions, num_samples, gradient, parts);
  }
  absl::StatusOr<std::vector<ShardReport>> Status() override { return inner_.Status(); }
  void Cancel() override { inner_.Cancel(); }

 private:
  ParameterClient& inner_;
  CallCounts& counts_;
};

// One worker's run in a test: what it trains, its schedule, and how it reaches the shards.
struct WorkerRun {
  int rank = 0;
  int batch = 16;
  int accumulate = 1;
  int epochs = 2;
  bool overlap = false;
  bool priority = false;
  bool async_push = false;
  bool push_pull = true;
  // The in-process client (tests/support) instead of gRPC; the transport options below then do
  // not apply.
  bool in_process = false;
  FaultSwitches* faults = nullptr;  // in-process only
  int64_t chunk_bytes = 0;
  int connections = 1;
  bool shared_memory = false;
  CallCounts* counts = nullptr;  // receives the client calls the trainer made (gRPC)
  Device* device = nullptr;      // CpuDevice if null
  DelayOptions delays;           // its rank and seed are the run's
  TrainStats* stats = nullptr;   // receives the trainer's stats after the run
  absl::Duration budget = absl::InfiniteDuration();        // TrainerOptions::max_duration
  absl::Duration pull_timeout = absl::InfiniteDuration();  // gRPC: the client's, if finite

  WorkerRun& Rank(int r) { return rank = r, *this; }
  WorkerRun& Batch(int b) { return batch = b, *this; }
  WorkerRun& Accumulate(int k) { return accumulate = k, *this; }
  WorkerRun& Epochs(int e) { return epochs = e, *this; }
  WorkerRun& Overlap(bool on = true) { return overlap = on, *this; }
  WorkerRun& Priority(bool on = true) { return priority = on, *this; }
  WorkerRun& AsyncPush(bool on = true) { return async_push = on, *this; }
  WorkerRun& PushPull(bool on) { return push_pull = on, *this; }
  WorkerRun& InProcess(FaultSwitches* f = nullptr) { return in_process = true, faults = f, *this; }
  WorkerRun& Chunks(int64_t bytes, int conns) {
    return chunk_bytes = bytes, connections = conns, *this;
  }
  WorkerRun& SharedMemory(bool on = true) { return shared_memory = on, *this; }
  WorkerRun& Counts(CallCounts* c) { return counts = c, *this; }
  WorkerRun& OnDevice(Device* d) { return device = d, *this; }
  WorkerRun& Delays(const DelayOptions& d) { return delays = d, *this; }
  WorkerRun& Stats(TrainStats* s) { return stats = s, *this; }
  WorkerRun& Budget(absl::Duration d) { return budget = d, *this; }
  WorkerRun& PullTimeout(absl::Duration d) { return pull_timeout = d, *this; }
};

// Trains `run` on the cluster's MLP (16 -> 8 -> 4, seed 5); returns the status of Run().
absl::Status TrainWorker(const Cluster& cluster, const Dataset& train, const WorkerRun& run) {
  CpuDevice cpu;
  Device& dev = run.device != nullptr ? *run.device : cpu;
  auto model = MakeMlp(16, {8}, 4, dev, 64);
  EXPECT_TRUE(model.ok());
  TrainerOptions o;
  o.rank = run.rank;
  o.batch_size = run.batch;
  o.accumulate = run.accumulate;
  o.epochs = run.epochs;
  o.seed = 5;
  o.schedule = ScheduleRequest{run.overlap, run.async_push, run.push_pull, run.priority};
  o.priority_min_part = 0;  // one part per layer, however small: these tests are about pieces
  o.delays = run.delays;
  o.delays.rank = run.rank;
  o.delays.seed = o.seed;
  o.max_duration = run.budget;
  std::atomic<bool> stop{false};
  if (run.in_process) {
    std::vector<Shard*> shards;
    for (const auto& server : cluster.servers) shards.push_back(&server->shard());
    InProcessClient client(shards, (*model)->layout().fingerprint(), (*model)->layout().total(),
                           /*incarnation=*/100 + run.rank, run.faults);
    Trainer trainer(o, **model, dev, client, train, nullptr, nullptr, nullptr);
    const absl::Status status = trainer.Run(stop);
    if (run.stats != nullptr) *run.stats = trainer.stats();
    return status;
  }
  GrpcClientOptions co;
  co.servers = cluster.addresses;
  co.fingerprint = (*model)->layout().fingerprint();
  co.total_params = (*model)->layout().total();
  co.rank = run.rank;
  co.chunk_bytes = run.chunk_bytes;
  co.connections = run.connections;
  co.shared_memory = run.shared_memory;
  co.shared_memory_slots = run.overlap || run.async_push ? 2 : 1;
  if (run.pull_timeout != absl::InfiniteDuration()) co.pull_timeout = run.pull_timeout;
  auto client = GrpcParameterClient::Create(co);
  EXPECT_TRUE(client.ok());
  CallCounts unused;
  CountingClient counting(**client, run.counts != nullptr ? *run.counts : unused);
  Trainer trainer(o, **model, dev, counting, train, nullptr, nullptr, nullptr);
  const absl::Status status = trainer.Run(stop);
  if (run.stats != nullptr) *run.stats = trainer.stats();
  return status;
}

std::vector<float> AllWeights(Cluster& c) {
  std::vector<float> all;
  for (auto& s : c.servers) {
    const std::vector<float> v = s->shard().Values();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

// Accuracy of the shards' current weights on `train` (the synthetic task's model).
double TrainAccuracy(Cluster& c, const Dataset& train) {
  CpuDevice dev;
  auto model = MakeMlp(16, {8}, 4, dev, 64);
  EXPECT_TRUE(model.ok());
  const std::vector<float> w = AllWeights(c);
  auto stats = EvaluateDataset(**model, dev, w.data(), train);
  EXPECT_TRUE(stats.ok()) << stats.status();
  return stats.ok() ? stats->correct / stats->count : 0.0;
}

TEST(Trainer, AccumulationMatchesTheLargerBatch) {
  const ImageDataset train = SyntheticData(256, 1);
  Cluster big = StartCluster(2, 1, ConsistencyMode::kBsp);
  ASSERT_TRUE(TrainWorker(big, train, WorkerRun{}.InProcess().Batch(32)).ok());
  Cluster accumulated = StartCluster(2, 1, ConsistencyMode::kBsp);
  ASSERT_TRUE(TrainWorker(accumulated, train, WorkerRun{}.InProcess().Accumulate(2)).ok());
  const auto a = AllWeights(big);
  const auto b = AllWeights(accumulated);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5f * (1 + std::abs(a[i]))) << i;
  EXPECT_EQ(big.servers[0]->shard().GetStatus().version, 16);  // 8 steps x 2 epochs
}

TEST(Trainer, ARestartedWorkerResumesAtTheShardsClock) {
  const ImageDataset train = SyntheticData(256, 2);
  Cluster once = StartCluster(2, 1, ConsistencyMode::kAsp);
  ASSERT_TRUE(TrainWorker(once, train, WorkerRun{}.InProcess().Batch(32)).ok());
  Cluster twice = StartCluster(2, 1, ConsistencyMode::kAsp);
  ASSERT_TRUE(TrainWorker(twice, train, WorkerRun{}.InProcess().Batch(32).Epochs(1)).ok());
  EXPECT_EQ(twice.servers[1]->shard().GetStatus().workers[0].clock, 8);
  // A fresh process, same rank: it must continue at step 8, not start over.
  ASSERT_TRUE(TrainWorker(twice, train, WorkerRun{}.InProcess().Batch(32)).ok());
  EXPECT_EQ(twice.servers[1]->shard().GetStatus().version, 16);
  EXPECT_EQ(AllWeights(once), AllWeights(twice));
}

// The shards' checkpoint folders are in the test's scratch folder, which goes after the body's
// locals: the shards, and the final checkpoint each writes as it stops, are done with it by then.
class TrainerWithCheckpoints : public ScratchDirTest {};

// BSP, 2 workers, 2 shards: shard 1 stops mid-run and a new process takes its port, restoring its
// checkpoint, while the workers wait for it (their retries have no fixed bound). Both register
// again with the new process, the rounds resume, and every gradient both declared is applied on
// both shards: the work account shows nothing skipped.
TEST_F(TrainerWithCheckpoints, AShardRestartedMidRunFromItsCheckpointLosesNoWork) {
  const ImageDataset train = SyntheticData(256, 3);
  const auto start_shard = [&](int id, int port) {
    ShardServerOptions o = SgdShardServer(ConsistencyMode::kBsp, 2, id, 2);
    o.port = port;
    o.shard.optimizer.lr = 0.1f;
    o.checkpoint_dir = Path("ps-" + std::to_string(id));
    o.checkpoint_every_updates = 25;
    return StartShardServer(o);
  };
  Cluster c;
  for (int s = 0; s < 2; ++s) {
    c.servers.push_back(start_shard(s, 0));
    ASSERT_NE(c.servers.back(), nullptr);
    c.addresses.push_back(LoopbackAddress(c.servers.back()->port()));
  }
  const int port1 = c.servers[1]->port();
  constexpr int kEpochs = 400;  // 4 steps each: 1600 steps, long enough to restart a shard within
  absl::Status results[2];
  std::thread workers[2];
  for (int r = 0; r < 2; ++r) {
    workers[r] = std::thread([&, r] {
      results[r] = TrainWorker(c, train, WorkerRun{}.Rank(r).Batch(32).Epochs(kEpochs));
    });
  }
  // Both shards past round 300 (each applies a round once both pushes reached it, so one may be
  // a round behind the other).
  while (std::min(c.servers[0]->shard().GetStatus().version,
                  c.servers[1]->shard().GetStatus().version) < 300) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  c.servers[1].reset();                     // stops after its final checkpoint
  absl::SleepFor(absl::Milliseconds(500));  // the workers retry meanwhile
  c.servers[1] = start_shard(1, port1);
  ASSERT_NE(c.servers[1], nullptr);
  for (std::thread& t : workers) t.join();
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  EXPECT_GE(c.servers[1]->shard().GetStatus().restored_version, 300);
  std::vector<ShardReport> reports;
  for (auto& server : c.servers) {
    const ShardStatus st = server->shard().GetStatus();
    EXPECT_EQ(st.version, 4 * kEpochs);
    ShardReport report;
    for (const WorkerStatusInfo& w : st.workers) {
      ShardReport::Worker out;
      out.rank = w.rank;
      out.clock = w.clock;
      out.state = WorkerStateName(w.state);
      out.applied = w.staleness.count();
      out.planned_steps = w.plan.steps;
      out.samples_per_step = w.plan.samples_per_step;
      report.workers.push_back(out);
    }
    reports.push_back(report);
  }
  const WorkAccount work = AccountWork(reports);
  EXPECT_EQ(work.gradients_expected, 2 * 2 * 4 * kEpochs);
  EXPECT_EQ(work.gradients_applied, work.gradients_expected);
  EXPECT_EQ(work.samples_skipped, 0);
}

// SSP with s = 0 and one worker: the prefetched pull of step c+1 (--overlap), or the pull that
// follows an asynchronous push (--async_push), must wait on the shard for this worker's push of
// step c, so either changes the timing but not one bit of the result.
TEST(Trainer, OverlapOrAsyncPushUnderSspZeroGivesTheSameWeights) {
  const ImageDataset train = SyntheticData(256, 4);
  Cluster plain = StartCluster(2, 1, ConsistencyMode::kSsp, 0);
  ASSERT_TRUE(TrainWorker(plain, train, WorkerRun{}.InProcess().Batch(32)).ok());
  for (const WorkerRun& run : {WorkerRun{}.InProcess().Batch(32).Overlap(),
                               WorkerRun{}.InProcess().Batch(32).AsyncPush()}) {
    SCOPED_TRACE(run.overlap ? "overlap" : "async push");
    Cluster c = StartCluster(2, 1, ConsistencyMode::kSsp, 0);
    ASSERT_TRUE(TrainWorker(c, train, run).ok());
    EXPECT_EQ(c.servers[0]->shard().GetStatus().version, 16);
    EXPECT_EQ(AllWeights(c), AllWeights(plain));
    EXPECT_EQ(c.servers[1]->shard().GetStatus().workers[0].staleness.max(), 0);
  }
}

// ASP: the prefetch reads before this worker's own previous push lands at most once per step.
TEST(Trainer, OverlapUnderAspStaysWithinOneUpdateOfStalenessAndLearns) {
  const ImageDataset train = SyntheticData(512, 5);
  Cluster c = StartCluster(1, 1, ConsistencyMode::kAsp);
  ASSERT_TRUE(TrainWorker(c, train, WorkerRun{}.InProcess().Epochs(5).Overlap()).ok());
  const ShardStatus status = c.servers[0]->shard().GetStatus();
  EXPECT_EQ(status.version, 160);
  EXPECT_LE(status.workers[0].staleness.max(), 1);
  EXPECT_GT(TrainAccuracy(c, train), 0.9);
}

// Both workers under priority scheduling: every step's weights arrive layer by layer and its
// gradients leave layer by layer, each layer cut at the shards' boundary (fc1 spans both
// shards). The shards apply whole clocks only, so the BSP result is the same to the bit, with
// accumulation's micro-batches in between.
TEST(Trainer, PriorityUnderBspGivesTheSameWeightsBitForBit) {
  const ImageDataset train = SyntheticData(256, 6);
  // fc1 (136 parameters) and fc2 (36) over shards [0, 86) and [86, 172): shard 0 gets fc1's
  // first piece, its whole range; shard 1 gets the rest of fc1 and all of fc2, in two pieces.
  const auto run = [&](bool priority) {
    Cluster c = StartCluster(2, 2, ConsistencyMode::kBsp);
    absl::Status s0, s1;
    std::thread t0([&] {
      s0 = TrainWorker(c, train, WorkerRun{}.InProcess().Batch(8).Accumulate(2).Priority(priority));
    });
    std::thread t1([&] {
      s1 = TrainWorker(c, train,
                       WorkerRun{}.InProcess().Rank(1).Batch(8).Accumulate(2).Priority(priority));
    });
    t0.join();
    t1.join();
    EXPECT_TRUE(s0.ok()) << s0;
    EXPECT_TRUE(s1.ok()) << s1;
    for (const auto& server : c.servers) {
      const ShardStatus st = server->shard().GetStatus();
      EXPECT_EQ(st.version, 16);          // 256 / (2 x 8 x 2) = 8 steps x 2 epochs
      EXPECT_EQ(st.pushes_accepted, 32);  // whole clocks, not pieces
      EXPECT_EQ(st.pushes_duplicate, 0);
    }
    EXPECT_EQ(c.servers[0]->shard().GetStatus().pieces_received, 0);
    EXPECT_EQ(c.servers[1]->shard().GetStatus().pieces_received, priority ? 64 : 0);
    return AllWeights(c);
  };
  const std::vector<float> plain = run(false);
  EXPECT_EQ(run(true), plain);
}

// One ASP worker: its next pull starts after the last piece of its push was acknowledged, so
// priority scheduling changes the timing only.
TEST(Trainer, PriorityUnderAspWithOneWorkerGivesTheSameWeights) {
  const ImageDataset train = SyntheticData(256, 7);
  Cluster plain = StartCluster(1, 1, ConsistencyMode::kAsp);
  ASSERT_TRUE(TrainWorker(plain, train, WorkerRun{}.InProcess()).ok());
  Cluster prioritised = StartCluster(1, 1, ConsistencyMode::kAsp);
  ASSERT_TRUE(TrainWorker(prioritised, train, WorkerRun{}.InProcess().Priority()).ok());
  EXPECT_EQ(prioritised.servers[0]->shard().GetStatus().version, 32);
  EXPECT_EQ(AllWeights(prioritised), AllWeights(plain));
}

// Chunks: every shard's range of 86 parameters travels in calls of at most 40 (3 chunks of 28-29),
// spread over two connections per shard, for pulls and pushes alike; with priority scheduling
// too. Same weights as whole transfers, bit for bit.
TEST(Trainer, ChunkedTransfersOverTwoConnectionsGiveTheSameWeights) {
  const ImageDataset train = SyntheticData(256, 9);
  const auto run = [&](int64_t chunk_bytes, bool priority) {
    Cluster c = StartCluster(2, 2, ConsistencyMode::kBsp);
    absl::Status s0, s1;
    std::thread t0(
        [&] { s0 = TrainWorker(c, train, WorkerRun{}.Priority(priority).Chunks(chunk_bytes, 2)); });
    std::thread t1([&] {
      s1 = TrainWorker(c, train, WorkerRun{}.Rank(1).Priority(priority).Chunks(chunk_bytes, 2));
    });
    t0.join();
    t1.join();
    EXPECT_TRUE(s0.ok()) << s0;
    EXPECT_TRUE(s1.ok()) << s1;
    EXPECT_EQ(c.servers[0]->shard().GetStatus().pushes_accepted, 32);  // 8 steps x 2 x 2 workers
    EXPECT_EQ(c.servers[0]->shard().GetStatus().pieces_received, chunk_bytes > 0 ? 96 : 0);
    return AllWeights(c);
  };
  const std::vector<float> whole = run(0, false);
  EXPECT_EQ(run(40 * sizeof(float), false), whole);
  EXPECT_EQ(run(40 * sizeof(float), true), whole);
}

// Shared memory: payloads through the workers' regions instead of the messages, for whole
// transfers, priority pieces and chunks alike (disjoint parts of the areas lent at once). Same
// weights, bit for bit, and every push and pull went through the regions.
TEST(Trainer, SharedMemoryGivesTheSameWeightsBitForBit) {
  const ImageDataset train = SyntheticData(256, 10);
  const auto run = [&](bool shared_memory, bool priority, int64_t chunk_bytes) {
    Cluster c = StartCluster(2, 2, ConsistencyMode::kBsp);
    absl::Status s0, s1;
    std::thread t0([&] {
      s0 = TrainWorker(
          c, train,
          WorkerRun{}.Priority(priority).SharedMemory(shared_memory).Chunks(chunk_bytes, 1));
    });
    std::thread t1([&] {
      s1 = TrainWorker(c, train,
                       WorkerRun{}
                           .Rank(1)
                           .Priority(priority)
                           .SharedMemory(shared_memory)
                           .Chunks(chunk_bytes, 1));
    });
    t0.join();
    t1.join();
    EXPECT_TRUE(s0.ok()) << s0;
    EXPECT_TRUE(s1.ok()) << s1;
    for (const auto& server : c.servers) {
      EXPECT_EQ(server->shard().GetStatus().pushes_accepted, 32);  // 8 steps x 2 epochs x 2
      EXPECT_EQ(server->service().shared_memory_workers(), shared_memory ? 2 : 0);
      // Every push call and every training pull call (one per step, piece and worker) went
      // through a region; evaluation reads are observers and never do.
      if (!shared_memory) {
        EXPECT_EQ(server->service().shared_memory_payloads(), 0);
      }
    }
    if (shared_memory && !priority && chunk_bytes == 0) {
      for (const auto& server : c.servers) {
        EXPECT_EQ(server->service().shared_memory_payloads(), 2 * 32);
      }
    }
    return AllWeights(c);
  };
  const std::vector<float> messages = run(false, false, 0);
  EXPECT_EQ(run(true, false, 0), messages);
  EXPECT_EQ(run(true, true, 0), messages);
  EXPECT_EQ(run(true, false, 40 * sizeof(float)), messages);
}

// BSP, 2 workers on 2 shards: pushing a step and pulling the next in one call per shard gives
// the weights of separate Push and Pull calls to the bit, over messages and shared memory. The
// shards hold each PushPull's pull until the round of its push is complete.
TEST(Trainer, PushPullGivesTheSameWeightsBitForBit) {
  const ImageDataset train = SyntheticData(256, 12);
  const auto run = [&](bool push_pull, bool shared_memory, CallCounts* counts) {
    Cluster c = StartCluster(2, 2, ConsistencyMode::kBsp);
    absl::Status s[2];
    std::thread workers[2];
    for (int r = 0; r < 2; ++r) {
      workers[r] = std::thread([&, r] {
        s[r] = TrainWorker(
            c, train,
            WorkerRun{}.Rank(r).SharedMemory(shared_memory).PushPull(push_pull).Counts(&counts[r]));
      });
    }
    for (auto& w : workers) w.join();
    EXPECT_TRUE(s[0].ok()) << s[0];
    EXPECT_TRUE(s[1].ok()) << s[1];
    for (const auto& server : c.servers) {
      EXPECT_EQ(server->shard().GetStatus().pushes_accepted, 32);  // 8 steps x 2 epochs x 2
      EXPECT_EQ(server->shard().GetStatus().pushes_duplicate, 0);
    }
    return AllWeights(c);
  };
  CallCounts separate[2], fused[2], fused_shared[2];
  const std::vector<float> reference = run(false, false, separate);
  EXPECT_EQ(run(true, false, fused), reference);
  EXPECT_EQ(run(true, true, fused_shared), reference);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(separate[r].pulls, 16);
    EXPECT_EQ(separate[r].pushes, 16);
    EXPECT_EQ(separate[r].push_pulls, 0);
    for (const CallCounts* c : {&fused[r], &fused_shared[r]}) {
      EXPECT_EQ(c->pulls, 1);  // the first step's; every later one came with a push
      EXPECT_EQ(c->push_pulls, 15);
      EXPECT_EQ(c->pushes, 1);  // the last step's
    }
  }
}

// A PushPull answered ABORTED in the middle of the pipeline: the worker drops what was in flight
// (the next step's gradient and the carried weights), registers again, resumes at the shards'
// clock (the aborted step, which never landed) and restarts the pipeline from a prefetch. Every
// step lands exactly once; both runs, with shared memory and without, move on to the end.
TEST(Trainer, PipelineRecoversFromAnAbortedPushPull) {
  const ImageDataset train = SyntheticData(512, 11);
  for (const bool shared_memory : {false, true}) {
    Cluster c = StartCluster(1, 1, ConsistencyMode::kAsp);
    CallCounts counts;
    counts.abort_push_pull = 50;
    ASSERT_TRUE(
        TrainWorker(
            c, train,
            WorkerRun{}.Epochs(5).Overlap().AsyncPush().SharedMemory(shared_memory).Counts(&counts))
            .ok());
    const ShardStatus status = c.servers[0]->shard().GetStatus();
    EXPECT_EQ(status.version, 160);
    EXPECT_EQ(status.pushes_accepted, 160);
    EXPECT_EQ(status.pushes_duplicate, 0);
    EXPECT_EQ(status.workers[0].clock, 160);
    EXPECT_EQ(counts.push_pulls, 159);  // 158 landed, one aborted
    EXPECT_EQ(counts.pulls, 4);         // the pipeline started twice: a pull and a prefetch each
    EXPECT_GT(TrainAccuracy(c, train), 0.9);
  }
}

// The pipeline through shared memory: the trainer keeps its two weights and two gradient buffers
// in the transport's two sets of areas, so every payload of every call goes through the region:
// 158 PushPulls (2 each), 2 pulls and 2 pushes.
// A worker whose device memory is apart from the host's (DeferredCopyDevice, below) keeps the
// same four buffers in the region, and pins it once, both sets together.
TEST(Trainer, PipelinedPushPullMovesEveryPayloadThroughTwoSetsOfSharedMemory) {
  const ImageDataset train = SyntheticData(512, 11);
  for (const bool device_memory : {false, true}) {
    SCOPED_TRACE(device_memory ? "device memory" : "cpu");
    Cluster c = StartCluster(1, 1, ConsistencyMode::kAsp);
    DeferredCopyDevice dev;
    ASSERT_TRUE(TrainWorker(c, train,
                            WorkerRun{}.Epochs(5).Overlap().AsyncPush().SharedMemory().OnDevice(
                                device_memory ? &dev : nullptr))
                    .ok());
    const ShardStatus status = c.servers[0]->shard().GetStatus();
    EXPECT_EQ(status.version, 160);
    EXPECT_LE(status.workers[0].staleness.max(), 1);
    EXPECT_EQ(c.servers[0]->service().shared_memory_payloads(), 2 * 158 + 2 + 2);
    EXPECT_GT(TrainAccuracy(c, train), 0.9);
    EXPECT_EQ(dev.counts().registered, device_memory ? 1 : 0);
    EXPECT_EQ(dev.counts().registered_bytes, device_memory ? 2 * 2 * 172 * sizeof(float) : 0);
    EXPECT_EQ(dev.counts().pinned_now, 0);
  }
}

// A worker whose device memory is apart from the host's (a GPU's memory model, with copies
// that land as late as allowed: DeferredCopyDevice) takes the shared-memory buffers, pins them
// until it stops, overlaps its copies with compute, and trains the CPU device's weights to the
// bit (BSP 2x2, whole steps and priority pieces; the pipeline's test covers ASP).
TEST(Trainer, AWorkerWithDeviceMemoryPinsTheSharedBuffersAndGivesTheSameWeights) {
  const ImageDataset train = SyntheticData(256, 13);
  const auto bsp = [&](bool device_memory, bool priority) {
    Cluster c = StartCluster(2, 2, ConsistencyMode::kBsp);
    DeferredCopyDevice dev0, dev1;
    absl::Status s0, s1;
    std::thread t0([&] {
      s0 = TrainWorker(
          c, train,
          WorkerRun{}.Priority(priority).SharedMemory().OnDevice(device_memory ? &dev0 : nullptr));
    });
    std::thread t1([&] {
      s1 = TrainWorker(c, train,
                       WorkerRun{}.Rank(1).Priority(priority).SharedMemory().OnDevice(
                           device_memory ? &dev1 : nullptr));
    });
    t0.join();
    t1.join();
    EXPECT_TRUE(s0.ok()) << s0;
    EXPECT_TRUE(s1.ok()) << s1;
    for (const DeferredCopyDevice* dev : {&dev0, &dev1}) {
      EXPECT_EQ(dev->counts().registered, device_memory ? 1 : 0);  // the region, once
      // Its gradient and weights areas: 172 parameters each.
      EXPECT_EQ(dev->counts().registered_bytes, device_memory ? 2 * 172 * sizeof(float) : 0);
      EXPECT_EQ(dev->counts().pinned_now, 0);
      EXPECT_EQ(dev->counts().async_to_host, device_memory ? 8 * 2 * 2 : 0);  // steps x layers
    }
    if (!priority) {
      for (const auto& server : c.servers) {
        EXPECT_EQ(server->service().shared_memory_payloads(), 2 * 32);
      }
    }
    return AllWeights(c);
  };
  const std::vector<float> cpu = bsp(false, false);
  EXPECT_EQ(bsp(true, false), cpu);
  EXPECT_EQ(bsp(true, true), cpu);
}

// SSP s = 0 allows no worker a clock ahead of its own pushes, so the pipeline (which pulls step
// c+2 right after pushing c) is off: the same weights as plain steps, and no call waits forever.
TEST(Trainer, OverlapAndAsyncPushUnderSspZeroGiveTheSameWeights) {
  const ImageDataset train = SyntheticData(256, 10);
  Cluster plain = StartCluster(2, 1, ConsistencyMode::kSsp, 0);
  ASSERT_TRUE(TrainWorker(plain, train, WorkerRun{}.Batch(32)).ok());
  Cluster both = StartCluster(2, 1, ConsistencyMode::kSsp, 0);
  CallCounts counts;
  ASSERT_TRUE(
      TrainWorker(both, train, WorkerRun{}.Batch(32).Overlap().AsyncPush().Counts(&counts)).ok());
  EXPECT_EQ(AllWeights(both), AllWeights(plain));
  EXPECT_EQ(counts.push_pulls, 0);
}

// SSP s = 1 with two workers: the pipeline runs, and the shards hold each pull to the bound.
TEST(Trainer, PipelinedPushPullUnderSspOneFinishesAndLearns) {
  const ImageDataset train = SyntheticData(512, 13);
  Cluster c = StartCluster(1, 2, ConsistencyMode::kSsp, 1);
  CallCounts counts[2];
  absl::Status s[2];
  std::thread workers[2];
  for (int r = 0; r < 2; ++r) {
    workers[r] = std::thread([&, r] {
      s[r] = TrainWorker(c, train,
                         WorkerRun{}.Rank(r).Epochs(5).Overlap().AsyncPush().Counts(&counts[r]));
    });
  }
  for (auto& w : workers) w.join();
  ASSERT_TRUE(s[0].ok()) << s[0];
  ASSERT_TRUE(s[1].ok()) << s[1];
  EXPECT_EQ(c.servers[0]->shard().GetStatus().version, 160);  // 80 steps x 2 workers
  for (int r = 0; r < 2; ++r) EXPECT_EQ(counts[r].push_pulls, 78);
  EXPECT_GT(TrainAccuracy(c, train), 0.9);
}

TEST(MergeParts, SmallLayersJoinThePartBeforeThemAndTheFirstLayerStaysAlone) {
  const std::vector<KeyRange> layers = {{0, 5}, {5, 100}, {100, 103}, {103, 300}, {300, 302}};
  EXPECT_EQ(MergeParts(layers, 0), layers);
  EXPECT_EQ(MergeParts(layers, 50), (std::vector<KeyRange>{{0, 5}, {5, 103}, {103, 302}}));
  EXPECT_EQ(MergeParts(layers, 1000), (std::vector<KeyRange>{{0, 5}, {5, 302}}));
  EXPECT_EQ(MergeParts({{0, 7}}, 50), (std::vector<KeyRange>{{0, 7}}));
}

TEST(Trainer, PriorityAndOverlapAreRefusedTogether) {
  const ImageDataset train = SyntheticData(64, 8);
  Cluster c = StartCluster(1, 1, ConsistencyMode::kAsp);
  const absl::Status s =
      TrainWorker(c, train, WorkerRun{}.InProcess().Epochs(1).Overlap().Priority());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(c.servers[0]->shard().GetStatus().version, 0);
}

// ASP with the prefetch and the asynchronous push. As separate calls (--push_pull=false), step
// c+1's weights are pulled while step c's push travels, so a gradient may lack this worker's own
// last two, never more. As the pipeline, one PushPull per step is in flight while the next step
// computes (a prefetch starts it; the last two steps pull nothing), and a gradient lacks at most
// this worker's own previous one.
TEST(Trainer, AsyncPushWithOverlapUnderAspStaysWithinItsStalenessAndLearns) {
  const ImageDataset train = SyntheticData(512, 11);
  for (const bool push_pull : {false, true}) {
    Cluster c = StartCluster(1, 1, ConsistencyMode::kAsp);
    CallCounts counts;
    ASSERT_TRUE(
        TrainWorker(c, train,
                    WorkerRun{}.Epochs(5).Overlap().AsyncPush().PushPull(push_pull).Counts(&counts))
            .ok());
    const ShardStatus status = c.servers[0]->shard().GetStatus();
    EXPECT_EQ(status.version, 160);
    EXPECT_EQ(status.pushes_duplicate, 0);
    EXPECT_LE(status.workers[0].staleness.max(), push_pull ? 1 : 2);
    EXPECT_EQ(counts.push_pulls, push_pull ? 158 : 0);
    if (push_pull) {
      EXPECT_EQ(counts.pulls, 2);  // steps 0 and 1 (the prefetch)
      EXPECT_EQ(counts.pushes, 2);
    }
    EXPECT_GT(TrainAccuracy(c, train), 0.9);
  }
}

// FNV-1a over the bytes of `values`: a fingerprint of weights to the bit.
uint64_t Fnv1a(const std::vector<float>& values) {
  uint64_t h = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
  for (size_t i = 0; i < values.size() * sizeof(float); ++i) {
    h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return h;
}

// The weights of a fixed BSP job (2 shards, 2 workers, 2 epochs of batch 16, SGD 0.1), pinned to
// the bit: a refactor of the training loop, the schedules, the transport or the model must leave
// them as they are. Every schedule gives the same bits under BSP (the tests above), so each one is
// checked against the pin. The bits depend on the kernels OpenBLAS picks for the CPU (Debian 12's
// OpenBLAS picks SkylakeX on Intel CPUs with AVX-512, Haswell on AMD Zen 4 and on CPUs with only
// AVX2): a pin per kernel set. ctest runs this test with OPENBLAS_CORETYPE=Haswell, which every
// x86-64 CPU with AVX2 runs, so the pin is checked on any such machine.
TEST(Trainer, BspWeightsArePinnedToTheBit) {
  const std::map<std::string, uint64_t> pins = {{"Haswell", 17289123429773871629ull},
                                                {"Zen", 17289123429773871629ull},
                                                {"SkylakeX", 6460332001532171477ull},
                                                {"Cooperlake", 6460332001532171477ull}};
  const auto pin = pins.find(CpuDevice::BlasKernels());
  if (pin == pins.end()) {
    GTEST_SKIP() << "no pinned weights for OpenBLAS's " << CpuDevice::BlasKernels()
                 << " kernels (run with OPENBLAS_CORETYPE=Haswell)";
  }
  const uint64_t kPinned = pin->second;
  const ImageDataset train = SyntheticData(256, 12);
  struct Variant {
    const char* name;
    WorkerRun run;
  };
  for (const Variant& v :
       {Variant{"push_pull over gRPC", WorkerRun{}},
        Variant{"push_pull in process", WorkerRun{}.InProcess()},
        Variant{"sequential in process", WorkerRun{}.InProcess().PushPull(false)},
        Variant{"priority in process", WorkerRun{}.InProcess().Priority()}}) {
    Cluster c = StartCluster(2, 2, ConsistencyMode::kBsp);
    absl::Status s[2];
    std::thread workers[2];
    for (int r = 0; r < 2; ++r) {
      workers[r] = std::thread([&, r] { s[r] = TrainWorker(c, train, WorkerRun(v.run).Rank(r)); });
    }
    for (auto& w : workers) w.join();
    ASSERT_TRUE(s[0].ok()) << s[0];
    ASSERT_TRUE(s[1].ok()) << s[1];
    EXPECT_EQ(Fnv1a(AllWeights(c)), kPinned) << v.name;
  }
}

// Faults on a chosen call, every schedule: an ABORTED answer (the worker registers again and
// resumes at the shards' clock) and a lost push reply (the push is sent again and answered as a
// duplicate). Under BSP (one worker) the weights are those of the undisturbed run to the bit;
// the double-buffered schedules (ASP, where their steps overlap) push every step exactly once.
TEST(Trainer, EveryScheduleSurvivesAnAbortedCallAndALostReply) {
  const ImageDataset train = SyntheticData(256, 13);
  constexpr int kSteps = 2 * 256 / 16;
  const auto run = [&](ConsistencyMode mode, const WorkerRun& r, FaultSwitches* faults) {
    Cluster c = StartCluster(1, 1, mode);
    EXPECT_TRUE(TrainWorker(c, train, WorkerRun(r).InProcess(faults)).ok());
    const ShardStatus st = c.servers[0]->shard().GetStatus();
    EXPECT_EQ(st.workers[0].clock, kSteps);
    EXPECT_EQ(st.version, kSteps);  // every step applied once
    return std::make_pair(AllWeights(c), st.pushes_duplicate);
  };
  for (const WorkerRun& r : {WorkerRun{}, WorkerRun{}.PushPull(false), WorkerRun{}.Priority()}) {
    const auto [reference, no_duplicates] = run(ConsistencyMode::kBsp, r, nullptr);
    EXPECT_EQ(no_duplicates, 0);
    for (int call : {1, 7, 20}) {
      FaultSwitches aborted;
      aborted.abort_call = call;
      EXPECT_EQ(run(ConsistencyMode::kBsp, r, &aborted).first, reference) << "abort " << call;
      FaultSwitches lost;
      lost.drop_push_reply = call;
      const auto [weights, duplicates] = run(ConsistencyMode::kBsp, r, &lost);
      // Priority pushes go out as parts, never as a whole Push: nothing to lose there.
      EXPECT_EQ(duplicates, r.priority ? 0 : 1) << "lost reply " << call;
      EXPECT_EQ(weights, reference) << "lost reply " << call;
    }
  }
  for (const WorkerRun& r :
       {WorkerRun{}.Overlap(), WorkerRun{}.AsyncPush(),
        WorkerRun{}.Overlap().AsyncPush().PushPull(false), WorkerRun{}.Overlap().AsyncPush()}) {
    for (int call : {2, 9}) {
      FaultSwitches aborted;
      aborted.abort_call = call;
      run(ConsistencyMode::kAsp, r, &aborted);
      FaultSwitches lost;
      lost.drop_push_reply = call;
      EXPECT_EQ(run(ConsistencyMode::kAsp, r, &lost).second, 1) << "lost reply " << call;
    }
  }
}

// A straggler's delay scales its own work, not the time the shards held its pulls for the
// others: counted, a pause of another worker would come back as this worker's delay, step after
// step (under BSP with jitter on every worker, the run slowed down many times over).
TEST(Trainer, InjectedDelaysScaleAWorkersOwnWorkNotItsWaitForOthers) {
  const ImageDataset train = SyntheticData(256, 3);
  for (const bool push_pull : {true, false}) {
    SCOPED_TRACE(push_pull ? "one PushPull per step" : "a pull and a push per step");
    Cluster c = StartCluster(1, 2, ConsistencyMode::kBsp);
    ASSERT_EQ(c.servers.size(), 1u);
    DelayOptions straggler;
    straggler.slowdown = 2;  // each step's delay: the worker's normal step time
    DelayOptions pausing;
    pausing.pause_step = 1;
    pausing.pause = absl::Milliseconds(1000);
    TrainStats straggler_stats;
    std::thread other([&] {
      EXPECT_TRUE(
          TrainWorker(c, train, WorkerRun().Rank(1).PushPull(push_pull).InProcess().Delays(pausing))
              .ok());
    });
    EXPECT_TRUE(  // not ASSERT: the other worker's thread is joined below
        TrainWorker(c, train,
                    WorkerRun().Rank(0).PushPull(push_pull).InProcess().Delays(straggler).Stats(
                        &straggler_stats))
            .ok());
    other.join();
    // 16 steps of a 16 -> 8 -> 4 MLP in process: the straggler's own work is a few milliseconds
    // a step at most, even under a sanitizer. Its pull of step 2 was held about 1 s for rank 1's
    // pause; had that counted, the moving average (a tenth of the newest step) would have added
    // about 100 ms to the next step's delay, and 100 x 0.9^k to each later one: over 700 ms.
    EXPECT_EQ(straggler_stats.steps, 16);
    EXPECT_LT(straggler_stats.injected, absl::Milliseconds(300));
  }
}

// A worker stopped by its time budget leaves the job: the other, which runs all its steps, goes
// on without it at once. Before, its pulls waited for the budgeted worker's lease to run out (here
// 120 s, so the 5 s pull deadline fails the run).
TEST(Trainer, AWorkerStoppedByItsTimeBudgetLeavesAndNoOneWaitsForIt) {
  const ImageDataset train = SyntheticData(512, 3);  // 2 epochs of 16 steps of 16 per worker
  struct Case {
    ConsistencyMode mode;
    int staleness;
    bool overlap, async_push;  // both: the pipeline (SSP with s >= 1)
  };
  for (const Case& k :
       {Case{ConsistencyMode::kBsp, 0, false, false}, Case{ConsistencyMode::kBsp, 0, true, false},
        Case{ConsistencyMode::kSsp, 0, false, false}, Case{ConsistencyMode::kSsp, 0, true, false},
        Case{ConsistencyMode::kSsp, 1, true, true}}) {
    SCOPED_TRACE(absl::StrCat(ConsistencyModeName(k.mode), " s=", k.staleness,
                              k.overlap ? " overlap" : "", k.async_push ? " async_push" : ""));
    Cluster c = StartCluster(1, 2, k.mode, k.staleness, /*lease=*/absl::Seconds(120));
    ASSERT_EQ(c.servers.size(), 1u);
    const WorkerRun schedule =
        WorkerRun().Overlap(k.overlap).AsyncPush(k.async_push).PullTimeout(absl::Seconds(5));
    TrainStats budgeted, whole;
    std::thread stopping([&] {
      EXPECT_TRUE(
          TrainWorker(c, train,
                      WorkerRun(schedule).Rank(0).Budget(absl::Milliseconds(1)).Stats(&budgeted))
              .ok());
    });
    const absl::Status status = TrainWorker(c, train, WorkerRun(schedule).Rank(1).Stats(&whole));
    stopping.join();
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_LT(budgeted.steps, 32);
    EXPECT_EQ(whole.steps, 32);
    const ShardStatus report = c.servers[0]->shard().GetStatus();
    EXPECT_EQ(report.workers[0].state, WorkerState::kExpired);
    EXPECT_EQ(report.workers[1].clock, 32);
  }
}

// A worker whose push is refused for good stops at once: its prefetch, which under SSP 0 waits
// for this worker's own push that failed, is cancelled instead of running out its deadline.
TEST(Trainer, AFinalErrorCancelsWhatIsInFlightInsteadOfWaitingForIt) {
  const ImageDataset train = SyntheticData(256, 3);
  Cluster c = StartCluster(1, 1, ConsistencyMode::kSsp, /*staleness=*/0);
  ASSERT_EQ(c.servers.size(), 1u);
  CallCounts counts;
  counts.refuse_push = 3;  // step 2's, while step 3's weights are being prefetched
  const absl::Status status =
      TrainWorker(c, train, WorkerRun().Overlap().Counts(&counts).PullTimeout(absl::Seconds(3)));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_EQ(counts.pushes.load(), 3);
  EXPECT_EQ(counts.pull_deadlines.load(), 0);
}

TEST(Trainer, LearnsTheSyntheticTask) {
  const ImageDataset train = SyntheticData(512, 3);
  Cluster c = StartCluster(1, 2, ConsistencyMode::kBsp);
  absl::Status s0, s1;
  std::thread t0([&] { s0 = TrainWorker(c, train, WorkerRun{}.InProcess().Epochs(5)); });
  std::thread t1([&] { s1 = TrainWorker(c, train, WorkerRun{}.InProcess().Rank(1).Epochs(5)); });
  t0.join();
  t1.join();
  ASSERT_TRUE(s0.ok()) << s0;
  ASSERT_TRUE(s1.ok()) << s1;
  EXPECT_GT(TrainAccuracy(c, train), 0.9);
}

// Shards that hold another model's weights refuse the worker with FAILED_PRECONDITION; no
// restart of the worker fixes that, so the trainer reports it as INVALID_ARGUMENT (ps_worker's
// exit 2, a configuration error) and the shards' weights stay as they were.
TEST(Trainer, ShardsHoldingAnotherModelAreAConfigurationError) {
  const ImageDataset train = SyntheticData(256, 4);
  Cluster c = StartCluster(1, 1, ConsistencyMode::kAsp);
  ASSERT_TRUE(TrainWorker(c, train, WorkerRun{}.InProcess().Epochs(1)).ok());
  const std::vector<float> trained = AllWeights(c);
  CpuDevice dev;
  auto wider = MakeMlp(16, {12}, 4, dev, 64);  // the cluster's model is 16 -> 8 -> 4
  ASSERT_TRUE(wider.ok());
  GrpcClientOptions co;
  co.servers = c.addresses;
  co.fingerprint = (*wider)->layout().fingerprint();
  co.total_params = (*wider)->layout().total();
  auto client = GrpcParameterClient::Create(co);
  ASSERT_TRUE(client.ok());
  TrainerOptions o;
  Trainer trainer(o, **wider, dev, **client, train, nullptr, nullptr, nullptr);
  std::atomic<bool> stop{false};
  const absl::Status s = trainer.Run(stop);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "the shards refuse this worker")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "another model")) << s;
  EXPECT_EQ(AllWeights(c), trained);
}

TEST(Trainer, AsJoinErrorLeavesEveryOtherStatusAsItIs) {
  EXPECT_EQ(AsJoinError(absl::UnavailableError("x")), absl::UnavailableError("x"));
  EXPECT_EQ(AsJoinError(absl::AbortedError("y")), absl::AbortedError("y"));
  EXPECT_EQ(AsJoinError(absl::OkStatus()), absl::OkStatus());
  EXPECT_EQ(AsJoinError(absl::FailedPreconditionError("z")),
            absl::InvalidArgumentError("the shards refuse this worker: z"));
}

// The evaluation replicas a trainer asks for: MLPs like the tests' model, counted in `made`.
Trainer::ReplicaFactory CountedMlpReplicas(int* made) {
  return [made](Device& device) {
    ++*made;
    return MakeMlp(16, {8}, 4, device, 64);
  };
}

// Rank 0 reports each finished epoch with the run's length in epochs: fractional when the run
// was given in steps, whose last, partial epoch gets no report. Under ASP, where a replica
// evaluates beside training, every report still arrives, in order, before Run returns.
TEST(Trainer, EpochReportsCountTheRunsLengthInEpochs) {
  const ImageDataset train = SyntheticData(256, 6);
  const ImageDataset test = SyntheticData(64, 7);
  for (const auto& [steps, mode] :
       {std::pair{int64_t{0}, ConsistencyMode::kBsp}, std::pair{int64_t{40}, ConsistencyMode::kBsp},
        std::pair{int64_t{0}, ConsistencyMode::kAsp}}) {
    Cluster c = StartCluster(1, 1, mode);
    CpuDevice dev, eval_dev;
    auto model = MakeMlp(16, {8}, 4, dev, 64);
    ASSERT_TRUE(model.ok());
    InProcessClient client({&c.servers[0]->shard()}, (*model)->layout().fingerprint(),
                           (*model)->layout().total(), /*incarnation=*/100, nullptr);
    TrainerOptions o;
    o.batch_size = 16;  // 16 steps an epoch
    o.epochs = 3;
    o.steps = steps;
    o.evaluate_each_epoch = true;
    std::vector<EpochReport> reports;
    Trainer trainer(o, **model, dev, client, train, &test, nullptr,
                    [&](const EpochReport& r) { reports.push_back(r); });
    int replicas = 0;
    trainer.UseEvaluationReplica(eval_dev, CountedMlpReplicas(&replicas));
    std::atomic<bool> stop{false};
    ASSERT_TRUE(trainer.Run(stop).ok());
    EXPECT_EQ(replicas, mode == ConsistencyMode::kAsp ? 1 : 0);
    ASSERT_EQ(reports.size(), steps == 0 ? 3u : 2u) << steps;
    for (size_t i = 0; i < reports.size(); ++i) {
      EXPECT_EQ(reports[i].epoch, static_cast<int>(i) + 1);
      EXPECT_EQ(reports[i].epochs, steps == 0 ? 3.0 : 2.5);
      EXPECT_GT(reports[i].test_accuracy, 0.0);
    }
  }
}

// An "eval" line's steps: the one that asked for it, and the steps done when its weights were
// read.
struct EvalLineSteps {
  int64_t requested = 0;
  int64_t read = 0;
};

// The "eval" lines of a metrics file, in file order.
std::vector<EvalLineSteps> EvalLinesOf(const std::string& path) {
  std::vector<EvalLineSteps> lines;
  std::ifstream in(path);
  for (std::string text; std::getline(in, text);) {
    if (!absl::StrContains(text, "\"kind\":\"eval\"")) continue;
    const nlohmann::json line = nlohmann::json::parse(text);
    lines.push_back({line.at("requested_step").get<int64_t>(), line.at("step").get<int64_t>()});
  }
  return lines;
}

// One worker of 64 steps (one epoch) that asks for an evaluation every 8, and may make a
// replica of the model to evaluate with (counted in `replicas`); `faults` holds the
// evaluations' reads. Its "eval" lines.
std::vector<EvalLineSteps> EvaluatingRun(ConsistencyMode mode, bool evaluate_inline,
                                         FaultSwitches& faults, Trainer** running, int* replicas) {
  Cluster c = StartCluster(1, 1, mode);
  const ImageDataset train = SyntheticData(1024, 8);
  const ImageDataset test = SyntheticData(64, 9);
  CpuDevice dev, eval_dev;
  auto model = MakeMlp(16, {8}, 4, dev, 64);
  EXPECT_TRUE(model.ok());
  const std::string path =
      testing::TempDir() + "/evaluating_run_" + std::to_string(getpid()) + ".jsonl";
  {
    auto metrics = JsonLinesWriter::Open(path);
    EXPECT_TRUE(metrics.ok());
    InProcessClient client({&c.servers[0]->shard()}, (*model)->layout().fingerprint(),
                           (*model)->layout().total(), /*incarnation=*/100, &faults);
    TrainerOptions o;
    o.batch_size = 16;
    o.epochs = 1;
    o.evaluate_every = 8;
    o.evaluate_inline = evaluate_inline;
    Trainer trainer(o, **model, dev, client, train, &test, metrics->get(), nullptr);
    trainer.UseEvaluationReplica(eval_dev, CountedMlpReplicas(replicas));
    *running = &trainer;
    std::atomic<bool> stop{false};
    EXPECT_EQ(trainer.Run(stop), absl::OkStatus());
    *running = nullptr;
  }
  const std::vector<EvalLineSteps> lines = EvalLinesOf(path);
  std::filesystem::remove(path);
  return lines;
}

std::vector<int64_t> RequestedSteps(const std::vector<EvalLineSteps>& lines) {
  std::vector<int64_t> steps;
  for (const EvalLineSteps& line : lines) steps.push_back(line.requested);
  return steps;
}

// Under ASP an evaluation that paused its rank would make the rank's next gradient stale by all
// the others pushed meanwhile: it runs beside training instead. The test holds the training
// after its 9th step until the first evaluation (of step 8) reads, and holds that read until 41
// steps are done: the periodic requests that pile up behind it give way to the newest, and the
// last request of the run is always evaluated.
TEST(Trainer, AspEvaluatesBesideTrainingAndTheNewestWaitingRequestWins) {
  FaultSwitches faults;
  Trainer* running = nullptr;
  std::atomic<bool> reading{false};
  std::vector<std::thread::id> readers;  // written by the evaluation thread alone
  bool trained_while_held = false;
  // Waits until `until` holds, or 20 s (the time a wrong implementation takes to fail); whether
  // it holds.
  const auto wait_for = [](const std::function<bool()>& until) {
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    while (!until() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
    return until();
  };
  faults.before_push = [&] {
    if (running->live().steps.load() >= 9) wait_for([&] { return reading.load(); });
  };
  faults.before_observer_read = [&] {
    readers.push_back(std::this_thread::get_id());
    if (readers.size() > 1) return;
    reading.store(true);
    trained_while_held = wait_for([&] { return running->live().steps.load() >= 41; });
  };
  int replicas = 0;
  const std::vector<EvalLineSteps> lines =
      EvaluatingRun(ConsistencyMode::kAsp, /*evaluate_inline=*/false, faults, &running, &replicas);
  EXPECT_EQ(replicas, 1);
  EXPECT_TRUE(trained_while_held);
  ASSERT_FALSE(readers.empty());
  EXPECT_NE(readers[0], std::this_thread::get_id());
  // Asked after steps 8, 16, ..., 56: 16, 24 and 32 waited behind the held 8 and gave way to 40
  // (the 41st step's accounting starts after the 40th's request). Which later ones give way
  // depends on the timing.
  const std::vector<int64_t> requested = RequestedSteps(lines);
  ASSERT_GE(requested.size(), 2u);
  EXPECT_EQ(requested[0], 8);
  EXPECT_GE(requested[1], 40);
  EXPECT_EQ(requested.back(), 56);
  EXPECT_TRUE(std::is_sorted(requested.begin(), requested.end()));
  // A line's step is where training stood when the weights were read: the first read was held
  // until 41 steps were done.
  EXPECT_GE(lines[0].read, 41);
  for (const EvalLineSteps& line : lines) EXPECT_GE(line.read, line.requested);
}

// BSP evaluates on the training thread (the others wait at the round anyway, and the weights
// read are exactly those after the step's round); so does SSP or ASP with evaluate_inline. Every
// request is evaluated, in order.
TEST(Trainer, BspAndInlineEvaluationsRunOnTheTrainingThread) {
  for (const bool bsp : {true, false}) {
    FaultSwitches faults;
    Trainer* running = nullptr;
    std::vector<std::thread::id> readers;
    faults.before_observer_read = [&] { readers.push_back(std::this_thread::get_id()); };
    int replicas = 0;
    const std::vector<EvalLineSteps> lines =
        EvaluatingRun(bsp ? ConsistencyMode::kBsp : ConsistencyMode::kAsp,
                      /*evaluate_inline=*/!bsp, faults, &running, &replicas);
    EXPECT_EQ(replicas, 0) << bsp;  // what runs inline needs none
    EXPECT_EQ(RequestedSteps(lines), (std::vector<int64_t>{8, 16, 24, 32, 40, 48, 56})) << bsp;
    // Read at once: each line's step is the one that asked for it.
    for (const EvalLineSteps& line : lines) EXPECT_EQ(line.read, line.requested) << bsp;
    ASSERT_EQ(readers.size(), 7u) << bsp;
    for (const std::thread::id reader : readers) EXPECT_EQ(reader, std::this_thread::get_id());
  }
}

TEST(Trainer, StopFlagCancels) {
  const ImageDataset train = SyntheticData(256, 4);
  Cluster c = StartCluster(1, 1, ConsistencyMode::kAsp);
  CpuDevice dev;
  auto model = MakeMlp(16, {8}, 4, dev, 64);
  GrpcClientOptions co;
  co.servers = c.addresses;
  co.fingerprint = (*model)->layout().fingerprint();
  co.total_params = (*model)->layout().total();
  auto client = GrpcParameterClient::Create(co);
  TrainerOptions o;
  Trainer trainer(o, **model, dev, **client, train, nullptr, nullptr, nullptr);
  std::atomic<bool> stop{true};
  EXPECT_EQ(trainer.Run(stop).code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace ps
