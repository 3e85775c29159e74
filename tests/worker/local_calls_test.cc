// The local call path (common/transport/local_frames.h): a client with shared memory sends Push,
// Pull and PushPull to the shards on its host over their Unix sockets instead of gRPC. It must
// give what gRPC gives, be refused without the cluster token, and end every fault as gRPC does:
// a cancelled or timed-out wait, a shard that drops the worker, a shard that restarts.

#include <fstream>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/local_call_server.h"
#include "server/shard_server.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/test_shards.h"
#include "worker/grpc_parameter_client.h"
#include "worker/local_channel.h"

namespace ps {
namespace {

constexpr uint64_t kFp = 7;

std::unique_ptr<ShardServer> StartShard(ConsistencyMode mode, int workers, int shard = 0,
                                        int shards = 1, int port = 0,
                                        const std::string& token_file = "") {
  ShardServerOptions o = SgdShardServer(mode, workers, shard, shards);
  o.security.token_file = token_file;
  o.security.allow_plaintext_token = true;
  o.port = port;
  o.shard.lease = absl::Seconds(30);
  return StartShardServer(o);
}

GrpcClientOptions ClientOf(const std::vector<const ShardServer*>& shards, int64_t total_params,
                           bool local_calls) {
  GrpcClientOptions o = ClientOptionsFor(shards, kFp, total_params);
  o.shared_memory = true;
  o.local_calls = local_calls;
  o.initial_backoff = absl::Milliseconds(10);
  return o;
}

int64_t LocalCallsOf(GrpcParameterClient& client, int shard) {
  auto reports = client.Status();
  EXPECT_TRUE(reports.ok()) << reports.status();
  return reports.ok() ? (*reports)[shard].local_calls : -1;
}

// Two ASP shards (SGD, lr 1) and a worker whose buffers are the shared region's: every step
// applied, the same weights and versions with and without local calls, and each call counted by
// the shard that answered it over its socket.
TEST(LocalCalls, CarryEveryCallAndGiveWhatGrpcGives) {
  std::vector<float> final_weights[2];
  for (const bool local : {true, false}) {
    auto a = StartShard(ConsistencyMode::kAsp, 1, 0, 2);
    auto b = StartShard(ConsistencyMode::kAsp, 1, 1, 2);
    auto client = GrpcParameterClient::Create(ClientOf({a.get(), b.get()}, 4, local));
    ASSERT_TRUE(client.ok()) << client.status();
    ASSERT_TRUE((*client)->Register(0, absl::Seconds(10)).ok());
    ASSERT_EQ((*client)->shared_memory_shards(), 2);
    const TransportBuffers buffers = (*client)->TakeTransportBuffers(0);
    ASSERT_EQ(buffers.weights.size(), 4u);
    ASSERT_TRUE((*client)->Init(std::vector<float>{1, 2, 3, 4}).ok());
    auto pulled = (*client)->Pull(0, false, buffers.weights);  // 1 call per shard
    ASSERT_TRUE(pulled.ok()) << pulled.status();
    std::vector<int64_t> versions = pulled->versions;
    for (int64_t step = 0; step < 5; ++step) {  // 5 calls per shard
      for (size_t i = 0; i < 4; ++i) buffers.gradient[i] = 0.25f * static_cast<float>(i + 1);
      auto both =
          (*client)->PushPull(step, versions, 1, buffers.gradient, step + 1, buffers.weights);
      ASSERT_TRUE(both.ok()) << both.status();
      EXPECT_EQ(both->pushed.applied, 2);
      versions = both->pulled.versions;
    }
    ASSERT_TRUE((*client)->Push(5, versions, 1, buffers.gradient).ok());  // 1 more each
    ASSERT_TRUE((*client)->Pull(6, false, buffers.weights).ok());         // and 1 more
    EXPECT_EQ(LocalCallsOf(**client, 0), local ? 8 : 0);
    EXPECT_EQ(LocalCallsOf(**client, 1), local ? 8 : 0);
    final_weights[local].assign(buffers.weights.begin(), buffers.weights.end());
  }
  // 6 gradients of 0.25 * (i + 1) applied with lr 1: exact in binary floating point.
  EXPECT_EQ(final_weights[1], (std::vector<float>{-0.5f, -1.0f, -1.5f, -2.0f}));
  EXPECT_EQ(final_weights[0], final_weights[1]);
}

// A connection must present the cluster token first: a wrong one is refused (and counted as an
// unauthenticated call), the right one is served.
class LocalCallsWithToken : public ScratchDirTest {};

TEST_F(LocalCallsWithToken, AreRefusedWithoutTheClusterToken) {
  const std::string token_file = Path("token");
  std::ofstream(token_file) << "s3cret\n";
  auto server = StartShard(ConsistencyMode::kAsp, 1, 0, 1, 0, token_file);
  auto local = LocalCallServer::Start(server->service());
  ASSERT_TRUE(local.ok()) << local.status();
  auto refused = LocalChannel::Connect((*local)->name(), "guess", absl::Seconds(5));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "wrong cluster token"))
      << refused.status();
  EXPECT_EQ(server->service().rejected_unauthenticated(), 1);
  auto accepted = LocalChannel::Connect((*local)->name(), "s3cret", absl::Seconds(5));
  EXPECT_TRUE(accepted.ok()) << accepted.status();
  auto nowhere = LocalChannel::Connect("ps-shard-that-is-not-there", "", absl::Seconds(5));
  EXPECT_EQ(nowhere.status().code(), absl::StatusCode::kUnavailable) << nowhere.status();
}

// A shard outlives many worker processes: the thread of each connection that ended is joined at
// the next one, not kept until the shard stops.
TEST(LocalCalls, TheThreadsOfEndedConnectionsArePutAway) {
  auto server = StartShard(ConsistencyMode::kAsp, 1);
  auto local = LocalCallServer::Start(server->service());
  ASSERT_TRUE(local.ok()) << local.status();
  for (int i = 0; i < 40; ++i) {
    auto channel = LocalChannel::Connect((*local)->name(), "", absl::Seconds(5));
    ASSERT_TRUE(channel.ok()) << channel.status();
  }                                         // each closed as it goes out of scope
  absl::SleepFor(absl::Milliseconds(300));  // their threads see the ends
  auto last = LocalChannel::Connect((*local)->name(), "", absl::Seconds(5));
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ((*local)->held_connections(), 1);  // the last one's
}

// Under BSP a pull waits for the round; rank 1 never pushes.
struct WaitingPull {
  std::unique_ptr<ShardServer> server;
  std::unique_ptr<GrpcParameterClient> first, second;
  std::vector<float> weights = std::vector<float>(3);
  std::vector<int64_t> versions;
};
WaitingPull StartWaitingPull(absl::Duration pull_timeout) {
  WaitingPull w;
  w.server = StartShard(ConsistencyMode::kBsp, 2);
  GrpcClientOptions o = ClientOf({w.server.get()}, 3, true);
  o.pull_timeout = pull_timeout;
  w.first = *GrpcParameterClient::Create(o);
  w.second = *GrpcParameterClient::Create(o);
  EXPECT_TRUE(w.first->Register(0, absl::Seconds(10)).ok());
  EXPECT_TRUE(w.second->Register(1, absl::Seconds(10)).ok());
  EXPECT_TRUE(w.first->Init(std::vector<float>{1, 2, 3}).ok());
  auto pulled = w.first->Pull(0, false, absl::MakeSpan(w.weights));
  EXPECT_TRUE(pulled.ok()) << pulled.status();
  if (pulled.ok()) w.versions = pulled->versions;
  EXPECT_TRUE(w.first->Push(0, w.versions, 1, std::vector<float>{1, 1, 1}).ok());
  return w;
}

// Runs `call` on a thread; its status once it ends, or nothing if it has not ended by `within`.
std::optional<absl::Status> EndsWithin(const std::function<absl::Status()>& call,
                                       const std::function<void()>& meanwhile,
                                       absl::Duration within) {
  absl::Status status;
  absl::Notification done;
  std::thread t([&] {
    status = call();
    done.Notify();
  });
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(300)));
  meanwhile();
  const bool ended = done.WaitForNotificationWithTimeout(within);
  if (!ended) return std::nullopt;  // the thread is left to its deadline: the test has failed
  t.join();
  return status;
}

TEST(LocalCalls, ACancelledWaitEndsAtOnce) {
  WaitingPull w = StartWaitingPull(absl::Seconds(60));
  std::optional<absl::Status> ended =
      EndsWithin([&] { return w.first->Pull(1, false, absl::MakeSpan(w.weights)).status(); },
                 [&] { w.first->Cancel(); }, absl::Seconds(5));
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->code(), absl::StatusCode::kCancelled) << *ended;
  EXPECT_EQ(LocalCallsOf(*w.second, 0), 3);  // rank 0's Pull, Push and the cancelled Pull
}

TEST(LocalCalls, AWaitPastItsDeadlineIsDeadlineExceeded) {
  WaitingPull w = StartWaitingPull(absl::Milliseconds(700));
  std::optional<absl::Status> ended =
      EndsWithin([&] { return w.first->Pull(1, false, absl::MakeSpan(w.weights)).status(); }, [] {},
                 absl::Seconds(5));
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->code(), absl::StatusCode::kDeadlineExceeded) << *ended;
  EXPECT_TRUE(absl::StrContains(ended->message(), "Pull to shard 0")) << *ended;
}

// As over gRPC (grpc_parameter_client_test): a heartbeat that hears ABORTED (another process
// took rank 0) restarts the call waiting on that shard, which then learns it at once.
TEST(LocalCalls, AnAbortedHeartbeatRestartsTheWaitingCall) {
  WaitingPull w = StartWaitingPull(absl::Seconds(20));
  std::unique_ptr<GrpcParameterClient> replacement;
  std::optional<absl::Status> ended =
      EndsWithin([&] { return w.first->Pull(1, false, absl::MakeSpan(w.weights)).status(); },
                 [&] {
                   replacement = *GrpcParameterClient::Create(ClientOf({w.server.get()}, 3, true));
                   ASSERT_TRUE(replacement->Register(0, absl::Seconds(10)).ok());
                   EXPECT_EQ(w.first->Heartbeat().code(), absl::StatusCode::kAborted);
                 },
                 absl::Seconds(10));
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->code(), absl::StatusCode::kAborted) << *ended;
  // (The new process's registration also dropped this one's shared region.)
  EXPECT_TRUE(absl::StrContains(ended->message(), "register again")) << *ended;
}

// A shard that restarts (on its port) closes the sockets: the next call goes over gRPC and hears
// ABORTED; registered again, the worker reaches the new shard's socket.
TEST(LocalCalls, AShardRestartSendsTheNextCallOverGrpcUntilTheWorkerRegistersAgain) {
  auto server = StartShard(ConsistencyMode::kAsp, 1);
  const int port = server->port();
  auto client = RegisteredClient(ClientOf({server.get()}, 3, true), {1, 2, 3});
  ASSERT_NE(client, nullptr);
  std::vector<float> w(3);
  ASSERT_TRUE(client->Pull(0, false, absl::MakeSpan(w)).ok());
  server.reset();
  server = StartShard(ConsistencyMode::kAsp, 1, 0, 1, port);
  EXPECT_EQ(client->Pull(0, false, absl::MakeSpan(w)).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(LocalCallsOf(*client, 0), 0);
  ASSERT_TRUE(client->Register(0, absl::Seconds(10)).ok());
  ASSERT_TRUE(client->Init(std::vector<float>{4, 5, 6}).ok());
  ASSERT_TRUE(client->Pull(0, false, absl::MakeSpan(w)).ok());
  EXPECT_EQ(w, (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(LocalCallsOf(*client, 0), 1);
}

}  // namespace
}  // namespace ps
