// The gRPC client of the shards against in-process shard servers: shared memory and its
// fallback, PushPull, retries after lost replies, and the faults of shards that go down,
// restart or drop this worker.

#include "worker/grpc_parameter_client.h"

#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/shard_server.h"
#include "tests/support/test_shards.h"

namespace ps {
namespace {

constexpr uint64_t kFp = 42;

// One ASP shard of 3 parameters (SGD, lr 1) and a client, registered with it and having
// initialised it to {1, 2, 3} unless `register_and_init` is false.
struct OneShardOptions {
  bool register_and_init = true;
  bool accept_shared_memory = true;  // the shard's
  bool shared_memory = true;         // the client's
  int shared_memory_slots = 1;
  int64_t chunk_bytes = 0;        // 0: one call per shard
  int drop_push_reply_every = 0;  // fault injection on the shard
  TensorEncoding push_encoding = TensorEncoding::kF32;
  double topk_ratio = 0.01;
};
struct OneShard {
  std::unique_ptr<ShardServer> server;
  std::unique_ptr<GrpcParameterClient> client;
};
OneShard StartOneShard(const OneShardOptions& options) {
  ShardServerOptions so = SgdShardServer(ConsistencyMode::kAsp, 1);
  so.accept_shared_memory = options.accept_shared_memory;
  so.drop_push_reply_every = options.drop_push_reply_every;
  std::unique_ptr<ShardServer> server = StartShardServer(so);
  if (server == nullptr) return {};
  GrpcClientOptions o = ClientOptionsFor({server.get()}, kFp, 3);
  o.shared_memory = options.shared_memory;
  o.shared_memory_slots = options.shared_memory_slots;
  o.chunk_bytes = options.chunk_bytes;
  o.push_encoding = options.push_encoding;
  o.topk_ratio = options.topk_ratio;
  o.initial_backoff = absl::Milliseconds(1);
  auto client = GrpcParameterClient::Create(o);
  EXPECT_TRUE(client.ok());
  if (options.register_and_init) {
    EXPECT_TRUE((*client)->Register(0, absl::Seconds(10)).ok());
    EXPECT_TRUE((*client)->Init(std::vector<float>{1, 2, 3}).ok());
  }
  return OneShard{std::move(server), std::move(*client)};
}

// A shard started with --shared_memory=false refuses, and the client then carries its payloads
// in the messages: same results.
TEST(SharedMemoryClient, FallsBackToMessagesWhenTheShardRefuses) {
  for (bool accept : {true, false}) {
    OneShardOptions options;
    options.accept_shared_memory = accept;
    OneShard one = StartOneShard(options);
    auto& server = one.server;
    auto& client = one.client;
    EXPECT_EQ(client->shared_memory_shards(), accept ? 1 : 0);
    auto pushed = client->Push(0, {0}, 1, std::vector<float>{1, 1, 1});
    ASSERT_TRUE(pushed.ok()) << pushed.status();
    std::vector<float> w(3);
    auto pulled = client->Pull(1, false, absl::MakeSpan(w));
    ASSERT_TRUE(pulled.ok()) << pulled.status();
    EXPECT_EQ(w, (std::vector<float>{0, 1, 2}));
    EXPECT_EQ(pulled->versions, (std::vector<int64_t>{1}));
    EXPECT_EQ(server->service().shared_memory_payloads(), accept ? 2 : 0);
  }
}

// Zero copy: the caller keeps its weights and gradient in the transport's buffers; the shard
// writes and reads them in place. Other buffers then travel in the messages (the areas are the
// caller's now, no longer bounce buffers), with the same results.
TEST(SharedMemoryClient, TakenBuffersAreReadAndWrittenInPlaceOthersTravelInMessages) {
  OneShardOptions options;
  options.register_and_init = false;
  OneShard one = StartOneShard(options);
  auto& server = one.server;
  auto& client = one.client;
  EXPECT_TRUE(client->TakeTransportBuffers(0).weights.empty());  // none before Register
  ASSERT_TRUE(client->Register(0, absl::Seconds(10)).ok());
  ASSERT_TRUE(client->Init(std::vector<float>{1, 2, 3}).ok());
  const TransportBuffers buffers = client->TakeTransportBuffers(0);
  ASSERT_EQ(buffers.weights.size(), 3u);
  ASSERT_EQ(buffers.gradient.size(), 3u);
  std::fill(buffers.gradient.begin(), buffers.gradient.end(), 1.0f);
  ASSERT_TRUE(client->Push(0, {0}, 1, buffers.gradient).ok());
  auto pulled = client->Pull(1, false, buffers.weights);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(std::vector<float>(buffers.weights.begin(), buffers.weights.end()),
            (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(server->service().shared_memory_payloads(), 2);
  // Another buffer: the values come in the message and the taken area is left alone.
  std::vector<float> other(3, -1.0f);
  buffers.weights[0] = 42.0f;
  ASSERT_TRUE(client->Push(1, {1}, 1, std::vector<float>{1, 1, 1}).ok());
  ASSERT_TRUE(client->Pull(2, false, absl::MakeSpan(other)).ok());
  EXPECT_EQ(other, (std::vector<float>{-1, 0, 1}));
  EXPECT_EQ(buffers.weights[0], 42.0f);
  EXPECT_EQ(server->service().shared_memory_payloads(), 2);
}

// The client's PushPull gives what Push then Pull give, over messages and shared memory, whole
// and in chunks; it takes the zero-copy buffers in place.
TEST(PushPullClient, GivesWhatPushThenPullGive) {
  for (bool shared : {false, true}) {
    for (int64_t chunk_bytes : {0, 4}) {
      OneShardOptions options;
      options.accept_shared_memory = shared;
      options.chunk_bytes = chunk_bytes;
      OneShard one = StartOneShard(options);
      const int64_t calls = chunk_bytes > 0 ? 3 : 1;  // one float per chunk
      auto& client = one.client;
      std::vector<float> w(3, -1.0f);
      auto both = client->PushPull(0, {0}, 1, std::vector<float>{1, 1, 1}, 1, absl::MakeSpan(w));
      ASSERT_TRUE(both.ok()) << both.status();
      EXPECT_EQ(w, (std::vector<float>{0, 1, 2}));
      EXPECT_EQ(both->pushed.applied, 1);
      EXPECT_EQ(both->pushed.payload_bytes, 12);
      EXPECT_EQ(both->pulled.versions, (std::vector<int64_t>{1}));
      EXPECT_EQ(both->pulled.payload_bytes, 12);
      EXPECT_EQ(one.server->service().shared_memory_payloads(), shared ? 2 * calls : 0);
      // Zero copy: the gradient is read and the weights written in the taken areas.
      const TransportBuffers buffers = client->TakeTransportBuffers(0);
      if (shared) {
        ASSERT_EQ(buffers.weights.size(), 3u);
        std::fill(buffers.gradient.begin(), buffers.gradient.end(), 2.0f);
        ASSERT_TRUE(client->PushPull(1, {1}, 1, buffers.gradient, 2, buffers.weights).ok());
        EXPECT_EQ(std::vector<float>(buffers.weights.begin(), buffers.weights.end()),
                  (std::vector<float>{-2, -1, 0}));
        EXPECT_EQ(one.server->service().shared_memory_payloads(), 4 * calls);
      }
    }
  }
}

// Two sets of transport buffers: each set's areas are its own, read and written in place; a set
// the region does not have is empty.
TEST(PushPullClient, TwoSetsOfTransportBuffersAreUsedInPlace) {
  OneShardOptions options;
  options.shared_memory_slots = 2;
  OneShard one = StartOneShard(options);
  auto& server = one.server;
  auto& client = one.client;
  const TransportBuffers first = client->TakeTransportBuffers(0);
  const TransportBuffers second = client->TakeTransportBuffers(1);
  EXPECT_TRUE(client->TakeTransportBuffers(2).weights.empty());
  ASSERT_EQ(second.weights.size(), 3u);
  EXPECT_NE(first.weights.data(), second.weights.data());
  EXPECT_NE(first.gradient.data(), second.gradient.data());
  std::fill(second.gradient.begin(), second.gradient.end(), 1.0f);
  std::fill(first.gradient.begin(), first.gradient.end(), 5.0f);  // not this one
  ASSERT_TRUE(client->PushPull(0, {0}, 1, second.gradient, 1, second.weights).ok());
  EXPECT_EQ(std::vector<float>(second.weights.begin(), second.weights.end()),
            (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(std::vector<float>(first.weights.begin(), first.weights.end()),
            (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(server->service().shared_memory_payloads(), 2);
  EXPECT_EQ(GrpcClientOptions{}.shared_memory_slots, 1);
  GrpcClientOptions too_many;
  too_many.servers = {"127.0.0.1:1"};
  too_many.shared_memory_slots = 17;
  EXPECT_EQ(GrpcParameterClient::Create(too_many).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A lost reply (the shard accepted the push): the client retries, the push is a duplicate, and
// the pull answers with the weights after the one application.
TEST(PushPullClient, RetryAfterALostReplyPullsWithoutApplyingTwice) {
  // The first Init is no push; the first PushPull's reply is lost.
  OneShardOptions options;
  options.shared_memory = false;
  options.drop_push_reply_every = 2;
  OneShard one = StartOneShard(options);
  auto& client = one.client;
  ASSERT_TRUE(client->Push(0, {0}, 1, std::vector<float>{1, 1, 1}).ok());  // seen: 1
  std::vector<float> w(3);
  auto both = client->PushPull(1, {1}, 1, std::vector<float>{1, 1, 1}, 2, absl::MakeSpan(w));
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->pushed.duplicates, 1);
  EXPECT_EQ(w, (std::vector<float>{-1, 0, 1}));
  EXPECT_EQ(both->pulled.versions, (std::vector<int64_t>{2}));
}

// Top-k error feedback under faults, with one of the 3 parameters sent per push (the largest of
// the residual) to the shard of SGD at lr 1 with weights {1, 2, 3}: the values a push carried
// reach the weights once, whatever happened to the push.
OneShard StartTopKShard(int drop_push_reply_every) {
  OneShardOptions options;
  options.shared_memory = false;
  options.drop_push_reply_every = drop_push_reply_every;
  options.push_encoding = TensorEncoding::kTopK;
  options.topk_ratio = 1.0 / 3;
  return StartOneShard(options);
}
std::vector<float> PulledWeights(GrpcParameterClient& client, int64_t clock) {
  std::vector<float> w(3);
  const absl::Status pulled = client.Pull(clock, false, absl::MakeSpan(w)).status();
  EXPECT_TRUE(pulled.ok()) << pulled;
  return w;
}

// A step pushed again after its shard had it (a worker computing it again after a rejoin) is a
// duplicate: the residual stays as the push the shard took left it, so the next push sends
// what it would have sent without the second. Keeping the second's residual sent 3 (the
// gradient's held-back 3 counted twice) where 2 was due.
TEST(TopKClient, APushTheShardHadAlreadyLeavesTheResidualAsTheTakenOneLeftIt) {
  OneShard one = StartTopKShard(0);
  GrpcParameterClient& client = *one.client;
  ASSERT_TRUE(client.Push(0, {0}, 1, std::vector<float>{3, 2, 1}).ok());  // sends the 3
  auto again = client.Push(0, {0}, 1, std::vector<float>{3, 2, 1});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->duplicates, 1);
  // The same through PushPull, the trainer's one call per step.
  std::vector<float> w(3);
  auto both = client.PushPull(0, {0}, 1, std::vector<float>{3, 2, 1}, 1, absl::MakeSpan(w));
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->pushed.duplicates, 1);
  EXPECT_EQ(w, (std::vector<float>{-2, 2, 3}));
  ASSERT_TRUE(client.Push(1, {1}, 1, std::vector<float>{0, 0, 0}).ok());  // the held-back 2
  EXPECT_EQ(PulledWeights(client, 2), (std::vector<float>{-2, 0, 3}));
}

// The same for a piece of a step that its shard holds staged, waiting for the step's other
// pieces (priority scheduling, chunks): the piece sent again is a duplicate, and the residual
// stays as the staged one left it. Then the step's last piece completes it.
TEST(TopKClient, APieceTheShardHoldsStagedAlreadyLeavesTheResidualAsTheStagedOneLeftIt) {
  OneShardOptions options;
  options.shared_memory = false;
  options.push_encoding = TensorEncoding::kTopK;
  options.topk_ratio = 0.5;  // one of a piece of 2, two of 3
  OneShard one = StartOneShard(options);
  GrpcParameterClient& client = *one.client;
  const std::vector<float> g = {3, 2, 1};
  const std::vector<KeyRange> first = {KeyRange{0, 2}}, last = {KeyRange{2, 3}};
  ASSERT_TRUE(client.PushParts(0, {0}, 1, g, first).ok());  // sends the 3, keeps the 2
  auto again = client.PushParts(0, {0}, 1, g, first);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(one.server->shard().GetStatus().pieces_received, 1);
  ASSERT_TRUE(client.PushParts(0, {0}, 1, g, last).ok());  // the 1: the step is whole
  EXPECT_EQ(PulledWeights(client, 1), (std::vector<float>{-2, 2, 2}));
  ASSERT_TRUE(client.Push(1, {1}, 1, std::vector<float>{0, 0, 0}).ok());  // the 2 (and a 0)
  EXPECT_EQ(PulledWeights(client, 2), (std::vector<float>{-2, 0, 2}));
}

// A lost reply: the shard took the push, the client's retry hears it is a duplicate. That
// duplicate is the push's own first send, so its residual stands (undoing it lost the 2 and 1
// held back and sent the 3 again).
TEST(TopKClient, ARetryAfterALostReplyKeepsTheResidualOfThePushTheShardTook) {
  OneShard one = StartTopKShard(2);  // the second push's reply is lost
  GrpcParameterClient& client = *one.client;
  ASSERT_TRUE(client.Push(0, {0}, 1, std::vector<float>{0, 0, 0}).ok());
  auto lost = client.Push(1, {1}, 1, std::vector<float>{3, 2, 1});
  ASSERT_TRUE(lost.ok()) << lost.status();
  EXPECT_EQ(lost->duplicates, 1);
  EXPECT_EQ(PulledWeights(client, 2), (std::vector<float>{-2, 2, 3}));
  ASSERT_TRUE(client.Push(2, {2}, 1, std::vector<float>{0, 0, 0}).ok());
  EXPECT_EQ(PulledWeights(client, 3), (std::vector<float>{-2, 0, 3}));
}

// A push answered ABORTED (here another process took this worker's rank) was not applied: its
// residual goes back, and the step computed again after the worker registers sends the 5 it
// carried (its gradient's 4 and the 1 held back), not 4 alone.
TEST(TopKClient, AnAbortedPushGivesBackWhatItCarried) {
  OneShard one = StartTopKShard(0);
  GrpcParameterClient& client = *one.client;
  ASSERT_TRUE(client.Push(0, {0}, 1, std::vector<float>{3, 2, 1}).ok());
  GrpcClientOptions o = ClientOptionsFor({one.server.get()}, kFp, 3);
  o.shared_memory = false;
  auto other = GrpcParameterClient::Create(o);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE((*other)->Register(0, absl::Seconds(10)).ok());  // takes over rank 0
  const absl::Status refused = client.Push(1, {1}, 1, std::vector<float>{0, 0, 4}).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kAborted) << refused;
  auto back = client.Register(0, absl::Seconds(10));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->resume_clock, 1);
  ASSERT_TRUE(client.Push(1, {1}, 1, std::vector<float>{0, 0, 4}).ok());
  EXPECT_EQ(PulledWeights(client, 2), (std::vector<float>{-2, 2, -2}));
}

// Two ASP shards of 4 parameters with a short lease (1.5 s), and a registered, initialised
// client.
struct TwoShards {
  std::vector<std::unique_ptr<ShardServer>> servers;
  std::vector<int> ports;
  std::unique_ptr<GrpcParameterClient> client;
};
std::unique_ptr<ShardServer> StartShardOfTwo(int shard_id, int port) {
  ShardServerOptions so;
  so.port = port;
  so.shard.shard_id = shard_id;
  so.shard.num_shards = 2;
  so.shard.consistency.mode = ConsistencyMode::kAsp;
  so.shard.consistency.num_workers = 1;
  so.shard.lease = absl::Milliseconds(1500);
  auto server = ShardServer::Start(so);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}
TwoShards StartTwoShards() {
  TwoShards two;
  for (int s = 0; s < 2; ++s) {
    two.servers.push_back(StartShardOfTwo(s, 0));
    two.ports.push_back(two.servers.back()->port());
  }
  GrpcClientOptions o = ClientOptionsFor({two.servers[0].get(), two.servers[1].get()}, kFp, 4);
  o.shared_memory = false;
  o.initial_backoff = absl::Milliseconds(20);
  o.report_unreachable_every = absl::Milliseconds(300);
  two.client = RegisteredClient(o, {1, 2, 3, 4});
  return two;
}

// Heartbeats go to each shard on their own: while shard 1 is down, every beat reports it
// (UNAVAILABLE, naming it) at once, and every beat still reaches shard 0 (it records the plan
// each one declares), so shard 0 keeps the worker's lease over many lease lengths. A beat that
// fails fast on the down shard once cancelled the one to shard 0 in flight: the worker's lease
// there expired and BSP went on without it.
TEST(ClientFaults, AShardThatIsDownNeverExpiresTheLeaseOnTheOthers) {
  TwoShards two = StartTwoShards();
  two.servers[1].reset();  // shut down
  // Beats back to back, then a pause, for more than two lease lengths (1.5 s each).
  for (int beat = 1; beat <= 40; ++beat) {
    two.client->SetWorkPlan(beat, 16);
    const absl::Status s = two.client->Heartbeat();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "Heartbeat to shard 1")) << s;
    const ShardStatus st = two.servers[0]->shard().GetStatus();
    ASSERT_EQ(st.workers[0].plan.steps, beat) << "beat " << beat << " never reached shard 0";
    if (beat % 10 == 0) absl::SleepFor(absl::Milliseconds(900));
  }
  const ShardStatus st = two.servers[0]->shard().GetStatus();
  EXPECT_EQ(st.workers[0].state, WorkerState::kLive);
  EXPECT_EQ(st.workers[0].plan.samples_per_step, 16);
}

// By default a call waits for a shard that is down as long as it takes: a push in flight while
// shard 1 restarts (without a checkpoint, on its port) gets through to it and hears that the
// shard restarted (ABORTED: register again), never UNAVAILABLE for having waited.
TEST(ClientFaults, ACallWaitsForARestartingShardWithNoFixedBound) {
  EXPECT_EQ(GrpcClientOptions{}.retry_for, absl::InfiniteDuration());
  TwoShards two = StartTwoShards();
  std::vector<float> w(4);
  auto pulled = two.client->Pull(0, false, absl::MakeSpan(w));
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  two.servers[1].reset();
  absl::Notification pushed;
  absl::Status push_status;
  std::thread pusher([&] {
    push_status = two.client->Push(0, pulled->versions, 1, std::vector<float>{1, 1, 1, 1}).status();
    pushed.Notify();
  });
  EXPECT_FALSE(pushed.WaitForNotificationWithTimeout(absl::Seconds(2)));
  two.servers[1] = StartShardOfTwo(1, two.ports[1]);
  ASSERT_NE(two.servers[1], nullptr);
  pusher.join();
  EXPECT_EQ(push_status.code(), absl::StatusCode::kAborted) << push_status;
  EXPECT_TRUE(absl::StrContains(push_status.message(), "shard 1")) << push_status;
}

// A heartbeat that hears ABORTED from a shard (it restarted, or another process took this
// rank) starts the calls in flight to that shard again, so they learn it at once instead of
// waiting on a process or a connection that is gone. Here a BSP pull waits for a round that
// never completes while a new process takes over rank 0: after one beat the pull is ABORTED,
// not left to its deadline.
TEST(ClientFaults, AnAbortedHeartbeatRestartsTheCallsInFlightToThatShard) {
  ShardServerOptions so = SgdShardServer(ConsistencyMode::kBsp, 2);
  so.shard.lease = absl::Seconds(30);
  std::unique_ptr<ShardServer> server = StartShardServer(so);
  ASSERT_NE(server, nullptr);
  GrpcClientOptions o = ClientOptionsFor({server.get()}, kFp, 3);
  o.shared_memory = false;
  o.pull_timeout = absl::Seconds(20);
  o.initial_backoff = absl::Milliseconds(20);
  auto first = GrpcParameterClient::Create(o);
  auto second = GrpcParameterClient::Create(o);
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_TRUE((*first)->Register(0, absl::Seconds(10)).ok());
  ASSERT_TRUE((*second)->Register(1, absl::Seconds(10)).ok());
  ASSERT_TRUE((*first)->Init(std::vector<float>{1, 2, 3}).ok());
  std::vector<float> w(3);
  auto pulled = (*first)->Pull(0, false, absl::MakeSpan(w));
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  ASSERT_TRUE((*first)->Push(0, pulled->versions, 1, std::vector<float>{1, 1, 1}).ok());
  absl::Status waiting_pull;
  absl::Notification done;
  std::thread puller([&] {
    std::vector<float> next(3);
    waiting_pull = (*first)->Pull(1, false, absl::MakeSpan(next)).status();  // rank 1 never pushes
    done.Notify();
  });
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(300)));
  auto replacement = GrpcParameterClient::Create(o);
  ASSERT_TRUE(replacement.ok());
  ASSERT_TRUE((*replacement)->Register(0, absl::Seconds(10)).ok());  // takes over rank 0
  EXPECT_EQ((*first)->Heartbeat().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  puller.join();
  EXPECT_EQ(waiting_pull.code(), absl::StatusCode::kAborted) << waiting_pull;
  EXPECT_TRUE(absl::StrContains(waiting_pull.message(), "held by another worker process"))
      << waiting_pull;
}

// Under BSP a 1 MiB pull from the only shard travels in two calls over two connections
// (split_lone_pulls): the worker gets the same weights and version as from one call.
TEST(SplitLonePulls, GiveWhatAWholePullGives) {
  constexpr int64_t kTotal = 1 << 18;  // 1 MiB
  std::unique_ptr<ShardServer> server = StartShardServer(SgdShardServer(ConsistencyMode::kBsp, 1));
  ASSERT_NE(server, nullptr);
  std::vector<float> init(kTotal);
  for (int64_t i = 0; i < kTotal; ++i) init[i] = static_cast<float>(i);
  std::vector<std::vector<float>> pulled;
  for (bool split : {false, true}) {
    GrpcClientOptions o = ClientOptionsFor({server.get()}, kFp, kTotal);
    o.shared_memory = false;
    o.split_lone_pulls = split;
    auto client = GrpcParameterClient::Create(o);
    ASSERT_TRUE(client.ok());
    ASSERT_TRUE((*client)->Register(0, absl::Seconds(10)).ok());
    const int64_t clock = split ? 1 : 0;
    if (!split) {
      ASSERT_TRUE((*client)->Init(init).ok());
    }
    std::vector<float> w(kTotal, -1.0f);
    auto stats = (*client)->Pull(clock, false, absl::MakeSpan(w));
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->versions, (std::vector<int64_t>{clock}));
    EXPECT_EQ(stats->payload_bytes, kTotal * 4);
    pulled.push_back(w);
    if (!split) {
      // One round, so that the second client pulls the next version.
      ASSERT_TRUE((*client)->Push(0, stats->versions, 1, std::vector<float>(kTotal, -1.0f)).ok());
    }
  }
  for (int64_t i = 0; i < kTotal; ++i) init[i] += 1.0f;
  EXPECT_EQ(pulled[1], init);
}

// A BSP shard of one worker (plain SGD, lr 0.5) and that worker's client, its payloads in the
// messages, registered and holding `init`; split_lone_pushes as `split`.
struct LoneBspShard {
  LoneBspShard(const std::vector<float>& init, bool split) {
    ShardServerOptions so = SgdShardServer(ConsistencyMode::kBsp, 1);
    so.shard.optimizer.lr = 0.5f;
    server = StartShardServer(so);
    if (server == nullptr) return;
    GrpcClientOptions o = ClientOptionsFor({server.get()}, kFp, static_cast<int64_t>(init.size()));
    o.shared_memory = false;
    o.split_lone_pushes = split;
    client = RegisteredClient(o, init);
  }
  // The pushes the shard received in pieces.
  int64_t PiecesReceived() {
    auto reports = client->Status();
    EXPECT_TRUE(reports.ok()) << reports.status();
    return reports.ok() ? (*reports)[0].pieces_received : -1;
  }
  std::unique_ptr<ShardServer> server;
  std::unique_ptr<GrpcParameterClient> client;
};

// `n` values following a pattern of period `period`, scaled and shifted.
std::vector<float> Pattern(int64_t n, int period, float scale, float shift) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % period) * scale + shift;
  return v;
}

// Trains with `train` (its calls and their checks) against a lone BSP shard holding `init`,
// once with whole calls and once with split_lone_pushes: the weights `train` returns must be the
// same bit for bit and moved from `init`, and the shard must have received `split_pieces`
// pieces of pushes when split, none when whole.
void ExpectSplitGivesWhatWholeGives(
    const std::vector<float>& init, int64_t split_pieces,
    const std::function<std::vector<float>(GrpcParameterClient&)>& train) {
  std::vector<std::vector<float>> weights;
  for (bool split : {false, true}) {
    SCOPED_TRACE(split ? "split" : "whole");
    LoneBspShard lone(init, split);
    ASSERT_NE(lone.client, nullptr);
    weights.push_back(train(*lone.client));
    EXPECT_EQ(lone.PiecesReceived(), split ? split_pieces : 0);
  }
  EXPECT_EQ(weights[1], weights[0]);
  EXPECT_NE(weights[0], init);
}

// Pushes `gradient` for clocks 0 .. clocks-1, each the lone worker's round and so applied by its
// push, then pulls the weights of version `clocks` whole.
std::vector<float> PushRoundsThenPull(GrpcParameterClient& client,
                                      const std::vector<float>& gradient, int64_t clocks) {
  for (int64_t clock = 0; clock < clocks; ++clock) {
    auto pushed = client.Push(clock, {clock}, 1, gradient);
    EXPECT_TRUE(pushed.ok()) << pushed.status();
    if (!pushed.ok()) return {};
    EXPECT_EQ(pushed->applied, 1);  // applied by the last piece when split
  }
  std::vector<float> w(gradient.size());
  auto pulled = client.Pull(clocks, false, absl::MakeSpan(w));
  EXPECT_TRUE(pulled.ok()) << pulled.status();
  if (!pulled.ok()) return {};
  EXPECT_EQ(pulled->versions, (std::vector<int64_t>{clocks}));
  EXPECT_EQ(pulled->payload_bytes, static_cast<int64_t>(w.size() * sizeof(float)));
  return w;
}

// Under BSP a 1 MiB push to the only shard travels in two calls over two connections
// (split_lone_pushes), which the shard gathers in the worker's round buffer: the same weights
// and version as one call, bit for bit, and the shard counts the pieces (2 pushes of 2).
TEST(SplitLonePushes, GiveWhatAWholePushGives) {
  constexpr int64_t kTotal = 1 << 18;  // 1 MiB
  const std::vector<float> gradient = Pattern(kTotal, 7, 0.125f, -0.25f);
  ExpectSplitGivesWhatWholeGives(
      Pattern(kTotal, 1000, 0.5f, 0.0f), 4,
      [&](GrpcParameterClient& client) { return PushRoundsThenPull(client, gradient, 2); });
}

// A 16 MiB push and pull with the only shard go as 8 pieces each over two connections, of which
// the client keeps 4 in flight (LoneShardWindow): every piece is sent, the later ones as the
// earlier ones are answered, and the weights are those of whole calls, bit for bit.
TEST(SplitLonePushes, PiecesBeyondTheWindowAreAllSent) {
  constexpr int64_t kTotal = int64_t{1} << 22;  // 16 MiB
  const std::vector<float> gradient = Pattern(kTotal, 3, 0.5f, -0.5f);
  ExpectSplitGivesWhatWholeGives(
      Pattern(kTotal, 1001, 0.25f, 0.5f), 8,
      [&](GrpcParameterClient& client) { return PushRoundsThenPull(client, gradient, 1); });
}

// From 4 MiB a PushPull with the only shard under BSP goes as a split push and a split pull
// (kLonePushPullSplitFrom): the same weights and version as one whole call, bit for bit.
TEST(SplitLonePushes, ALargePushPullGoesAsASplitPushAndASplitPull) {
  constexpr int64_t kTotal = kLonePushPullSplitFrom / 4;
  const std::vector<float> gradient = Pattern(kTotal, 5, 0.5f, -1.0f);
  ExpectSplitGivesWhatWholeGives(
      Pattern(kTotal, 999, 0.25f, 0.0f), 2, [&](GrpcParameterClient& client) {
        std::vector<float> w(kTotal);
        auto both = client.PushPull(0, {0}, 1, gradient, 1, absl::MakeSpan(w));
        EXPECT_TRUE(both.ok()) << both.status();
        if (both.ok()) {
          EXPECT_EQ(both->pulled.versions, (std::vector<int64_t>{1}));
        }
        return w;
      });
}

}  // namespace
}  // namespace ps
