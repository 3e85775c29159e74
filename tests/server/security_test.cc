// The shard server's defences and durability in-process, over real gRPC on loopback: the cluster
// token, TLS and mutual TLS, health reporting, message-size limits, lost replies, and restart
// from a checkpoint. Each refusal asserts its exact code and that the shard did not change.

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/transport/grpc_security.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "server/shard_server.h"
#include "tests/support/test_shards.h"
#include "worker/grpc_parameter_client.h"

namespace ps {
namespace {

constexpr uint64_t kFp = 42;

// The process's folder for certificates, tokens and checkpoints; removed after the last test.
std::string ProcessDir() {
  return testing::TempDir() + "/ps_security_test_" + std::to_string(::getpid());
}

class RemoveProcessDir : public testing::Environment {
 public:
  void TearDown() override { std::filesystem::remove_all(ProcessDir()); }
};
testing::Environment* const kRemoveProcessDir =
    testing::AddGlobalTestEnvironment(new RemoveProcessDir);

// Test certificates made once per process by scripts/make_test_certs.sh.
const std::string& CertDir() {
  static const std::string dir = [] {
    const char* src = std::getenv("PS_SOURCE_DIR");
    const std::string d = ProcessDir();
    const std::string cmd = std::string(src != nullptr ? src : ".") +
                            "/scripts/make_test_certs.sh " + d + " >/dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return d;
  }();
  return dir;
}

std::string WriteToken(const std::string& name, const std::string& token) {
  const std::string path = CertDir() + "/" + name;
  std::ofstream(path) << token << "\n";
  return path;
}

ShardServerOptions BaseOptions() {
  ShardServerOptions o;
  o.shard.consistency.mode = ConsistencyMode::kAsp;
  o.shard.consistency.num_workers = 2;
  o.shard.optimizer.lr = 1.0f;
  return o;
}

GrpcClientOptions ClientOptions(const ShardServer& server, int64_t total = 4) {
  GrpcClientOptions o = ClientOptionsFor({&server}, kFp, total);
  o.retry_for = absl::Seconds(2);
  o.call_timeout = absl::Seconds(5);
  return o;
}

// Registers rank 0, initialises [1, 2, 3, 4] and returns the status of the whole exchange.
absl::Status RegisterAndInit(GrpcParameterClient& client) {
  absl::StatusOr<ClusterInfo> info = client.Register(0, absl::Seconds(5));
  if (!info.ok()) return info.status();
  const std::vector<float> init = {1, 2, 3, 4};
  return client.Init(init);
}

// As the only worker, steps clocks 0 .. steps-1: each a pull, then a push of `gradient`.
void PullAndPushSteps(GrpcParameterClient& client, int64_t steps,
                      const std::vector<float>& gradient) {
  std::vector<float> w(gradient.size());
  for (int64_t step = 0; step < steps; ++step) {
    auto pulled = client.Pull(step, false, absl::MakeSpan(w));
    ASSERT_TRUE(pulled.ok()) << pulled.status();
    auto pushed = client.Push(step, pulled->versions, 1, gradient);
    ASSERT_TRUE(pushed.ok()) << pushed.status();
  }
}

ClientSecurity Client(const std::string& ca, const std::string& cert, const std::string& key,
                      const std::string& token_file, bool plaintext_token = false) {
  SecurityOptions o;
  o.tls_ca = ca;
  o.tls_cert = cert;
  o.tls_key = key;
  o.token_file = token_file;
  o.allow_plaintext_token = plaintext_token;
  auto s = MakeClientSecurity(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

TEST(Token, WithoutTlsIsRefusedUnlessAllowed) {
  ShardServerOptions o = BaseOptions();
  o.security.token_file = WriteToken("token-a", "s3cret");
  EXPECT_EQ(ShardServer::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
  SecurityOptions c;
  c.token_file = o.security.token_file;
  EXPECT_EQ(MakeClientSecurity(c).status().code(), absl::StatusCode::kInvalidArgument);
  o.security.token_file = WriteToken("token-empty", "  ");
  o.security.allow_plaintext_token = true;
  EXPECT_EQ(ShardServer::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Token, MissingOrWrongTokenIsUnauthenticatedAndRunsNoHandler) {
  ShardServerOptions o = BaseOptions();
  o.security.token_file = WriteToken("token-b", "right-token");
  o.security.allow_plaintext_token = true;
  auto server = ShardServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();

  for (const std::string& token : {std::string(), std::string("wrong-token")}) {
    GrpcClientOptions c = ClientOptions(**server);
    if (!token.empty()) {
      c.security = Client("", "", "", WriteToken("token-wrong", token), /*plaintext=*/true);
    }
    auto client = GrpcParameterClient::Create(c);
    ASSERT_TRUE(client.ok());
    EXPECT_EQ(RegisterAndInit(**client).code(), absl::StatusCode::kUnauthenticated);
    std::vector<float> w(4);
    EXPECT_EQ((*client)->Pull(0, true, absl::MakeSpan(w)).status().code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ((*client)->Status().status().code(), absl::StatusCode::kUnauthenticated);
  }
  // No handler ran: nobody registered, nothing was initialised.
  const ShardStatus st = (*server)->shard().GetStatus();
  EXPECT_FALSE(st.initialized);
  EXPECT_EQ(st.workers[0].state, WorkerState::kPending);
  EXPECT_EQ((*server)->service().rejected_unauthenticated(), 6);

  GrpcClientOptions c = ClientOptions(**server);
  c.security = Client("", "", "", o.security.token_file, /*plaintext=*/true);
  auto client = GrpcParameterClient::Create(c);
  ASSERT_TRUE(client.ok());
  EXPECT_TRUE(RegisterAndInit(**client).ok());
  EXPECT_TRUE((*server)->shard().GetStatus().initialized);
}

TEST(Tls, MutualTlsWithTokenTrainsAndRefusesStrangers) {
  const std::string d = CertDir();
  ShardServerOptions o = BaseOptions();
  o.security.tls_cert = d + "/server.pem";
  o.security.tls_key = d + "/server.key";
  o.security.tls_ca = d + "/ca.pem";
  o.security.token_file = d + "/token";
  auto server = ShardServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();

  struct Stranger {
    const char* what;
    ClientSecurity security;
    absl::StatusCode code;
  };
  const std::vector<Stranger> strangers = {
      {"no client certificate", Client(d + "/ca.pem", "", "", d + "/token"),
       absl::StatusCode::kUnavailable},
      {"client certificate of another CA",
       Client(d + "/ca.pem", d + "/other-client.pem", d + "/other-client.key", d + "/token"),
       absl::StatusCode::kUnavailable},
      {"server not trusted",
       Client(d + "/other-ca.pem", d + "/client.pem", d + "/client.key", d + "/token"),
       absl::StatusCode::kUnavailable},
      {"plaintext", ClientSecurity(), absl::StatusCode::kUnavailable},
      {"no token", Client(d + "/ca.pem", d + "/client.pem", d + "/client.key", ""),
       absl::StatusCode::kUnauthenticated},
  };
  for (const Stranger& s : strangers) {
    GrpcClientOptions c = ClientOptions(**server);
    c.security = s.security;
    c.retry_for = absl::ZeroDuration();
    auto client = GrpcParameterClient::Create(c);
    ASSERT_TRUE(client.ok());
    // Init and Status fail fast; Register would wait for the server to become reachable.
    const std::vector<float> init = {9, 9, 9, 9};
    EXPECT_EQ((*client)->Init(init).code(), s.code) << s.what;
    EXPECT_EQ((*client)->Status().status().code(), s.code) << s.what;
    EXPECT_EQ(
        (*client)->Register(0, absl::Milliseconds(300)).status().code(),
        s.code == absl::StatusCode::kUnavailable ? absl::StatusCode::kDeadlineExceeded : s.code)
        << s.what;
  }
  EXPECT_FALSE((*server)->shard().GetStatus().initialized);
  EXPECT_EQ((*server)->shard().GetStatus().workers[0].state, WorkerState::kPending);

  GrpcClientOptions c = ClientOptions(**server);
  c.security = Client(d + "/ca.pem", d + "/client.pem", d + "/client.key", d + "/token");
  auto client = GrpcParameterClient::Create(c);
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(RegisterAndInit(**client).ok());
  std::vector<float> w(4);
  auto pulled = (*client)->Pull(0, false, absl::MakeSpan(w));
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  const std::vector<float> g = {1, 1, 1, 1};
  ASSERT_TRUE((*client)->Push(0, pulled->versions, 1, g).ok());
  EXPECT_EQ((*server)->shard().Values(), (std::vector<float>{0, 1, 2, 3}));
}

grpc::health::v1::HealthCheckResponse::ServingStatus Health(int port, const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(LoopbackAddress(port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  const grpc::Status st = stub->Check(&ctx, req, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return resp.status();
}

TEST(Health, ParametersServeOnlyOnceInitialisedOnBothPorts) {
  ShardServerOptions o = BaseOptions();
  o.health_port = 0;
  auto server = ShardServer::Start(o);
  ASSERT_TRUE(server.ok());
  ASSERT_GT((*server)->health_port(), 0);
  using R = grpc::health::v1::HealthCheckResponse;
  for (int port : {(*server)->port(), (*server)->health_port()}) {
    EXPECT_EQ(Health(port, ""), R::SERVING);
    EXPECT_EQ(Health(port, kParameterServiceName), R::NOT_SERVING);
  }
  auto client = GrpcParameterClient::Create(ClientOptions(**server));
  ASSERT_TRUE(RegisterAndInit(**client).ok());
  for (int port : {(*server)->port(), (*server)->health_port()}) {
    EXPECT_EQ(Health(port, kParameterServiceName), R::SERVING);
  }
  // The health port serves nothing else.
  auto stub = ps::v1::ParameterServer::NewStub(grpc::CreateChannel(
      LoopbackAddress((*server)->health_port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ps::v1::GetStatusResponse status;
  EXPECT_EQ(stub->GetStatus(&ctx, ps::v1::GetStatusRequest(), &status).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

TEST(Limits, OversizedMessageIsResourceExhaustedAndChangesNothing) {
  ShardServerOptions o = BaseOptions();
  o.max_message_bytes = 1 << 20;
  auto server = ShardServer::Start(o);
  ASSERT_TRUE(server.ok());
  const int64_t n = 512 * 1024;  // 2 MiB of floats
  GrpcClientOptions c = ClientOptions(**server, n);
  c.max_message_bytes = 8 << 20;
  auto client = GrpcParameterClient::Create(c);
  ASSERT_TRUE((*client)->Register(0, absl::Seconds(5)).ok());
  const std::vector<float> init(n, 1.0f);
  EXPECT_EQ((*client)->Init(init).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE((*server)->shard().GetStatus().initialized);
}

TEST(Faults, LostPushRepliesAreRetriedAndAppliedExactlyOnce) {
  ShardServerOptions o = BaseOptions();
  o.drop_push_reply_every = 2;
  auto server = ShardServer::Start(o);
  ASSERT_TRUE(server.ok());
  GrpcClientOptions c = ClientOptions(**server);
  c.initial_backoff = absl::Milliseconds(1);
  c.duplicate_pushes = true;
  auto client = GrpcParameterClient::Create(c);
  ASSERT_TRUE(RegisterAndInit(**client).ok());
  ASSERT_NO_FATAL_FAILURE(PullAndPushSteps(**client, 6, {1, 1, 1, 1}));
  const ShardStatus st = (*server)->shard().GetStatus();
  EXPECT_EQ(st.version, 6);
  EXPECT_EQ(st.pushes_accepted, 6);
  EXPECT_GE(st.pushes_duplicate, 6);  // the deliberate duplicates, plus retried lost replies
  EXPECT_EQ((*server)->shard().Values(), (std::vector<float>{-5, -4, -3, -2}));
}

TEST(Restart, ShardRestoresItsFinalCheckpointAndWorkersRegisterAgain) {
  const std::string dir = CertDir() + "/ckpt";
  std::filesystem::remove_all(dir);
  ShardServerOptions o = BaseOptions();
  o.checkpoint_dir = dir;
  std::vector<float> before;
  int port = 0;
  GrpcClientOptions c;
  {
    auto server = ShardServer::Start(o);
    ASSERT_TRUE(server.ok());
    port = (*server)->port();
    c = ClientOptions(**server);
    auto client = GrpcParameterClient::Create(c);
    ASSERT_TRUE(RegisterAndInit(**client).ok());
    ASSERT_NO_FATAL_FAILURE(PullAndPushSteps(**client, 3, {0.5f, 0.25f, 1, 2}));
    before = (*server)->shard().Values();
    ASSERT_TRUE((*server)->Shutdown().ok());
  }
  o.port = port;
  auto restarted = ShardServer::Start(o);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  ASSERT_TRUE((*restarted)->restored().has_value());
  const ShardStatus st = (*restarted)->shard().GetStatus();
  EXPECT_EQ(st.version, 3);
  EXPECT_EQ(st.restored_version, 3);
  EXPECT_EQ(st.workers[0].clock, 3);
  EXPECT_EQ((*restarted)->shard().Values(), before);

  // A client still holding the old shard incarnation is told to register again, and resumes
  // at the clock the shard restored.
  auto client = GrpcParameterClient::Create(c);
  ASSERT_TRUE((*client)->Register(0, absl::Seconds(5)).ok());
  ShardServerOptions other = o;
  other.port = 0;
  other.checkpoint_dir = dir + "-other";
  // (Incarnations are random per process: a second Start draws another.)
  auto second = ShardServer::Start(other);
  ASSERT_TRUE(second.ok());
  EXPECT_NE((*second)->shard().options().incarnation, (*restarted)->shard().options().incarnation);
  auto info = (*client)->Register(0, absl::Seconds(5));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->resume_clock, 3);
  EXPECT_TRUE(info->initialized);
}

TEST(Restart, AShardPutBackToANamedCheckpointRestoresItAndDropsTheNewerOnes) {
  const std::string dir = CertDir() + "/ckpt-named";
  std::filesystem::remove_all(dir);
  ShardServerOptions o = BaseOptions();
  o.checkpoint_dir = dir;
  o.checkpoint_keep = 5;
  o.checkpoint_every_updates = 2;
  {
    auto server = ShardServer::Start(o);
    ASSERT_TRUE(server.ok());
    auto client = GrpcParameterClient::Create(ClientOptions(**server));
    ASSERT_TRUE(RegisterAndInit(**client).ok());
    std::vector<float> w(4);
    for (int64_t step = 0; step < 6; ++step) {
      auto pulled = (*client)->Pull(step, false, absl::MakeSpan(w));
      ASSERT_TRUE(pulled.ok()) << pulled.status();
      ASSERT_TRUE((*client)->Push(step, pulled->versions, 1, {1, 1, 1, 1}).ok());
      // Each checkpoint on disk before the next update: the writer skips one a newer one
      // supersedes in its queue.
      const int64_t version = step + 1;
      for (int i = 0;
           i < 500 && version % 2 == 0 && (*server)->service().checkpoint_version() < version;
           ++i) {
        absl::SleepFor(absl::Milliseconds(10));
      }
    }
    ASSERT_TRUE((*server)->Shutdown().ok());
  }
  o.restore_version = 4;
  {
    auto restored = ShardServer::Start(o);
    ASSERT_TRUE(restored.ok()) << restored.status();
    ASSERT_TRUE((*restored)->restored().has_value());
    EXPECT_EQ((*restored)->restored()->sequence, 4u);
    const ShardStatus st = (*restored)->shard().GetStatus();
    EXPECT_EQ(st.version, 4);
    EXPECT_EQ(st.workers[0].clock, 4);
    EXPECT_EQ((*restored)->shard().Values(), (std::vector<float>{-3, -2, -1, 0}));
    std::vector<uint64_t> left;
    for (const CheckpointInfo& c : CheckpointDir::Open(dir, 5)->List()) left.push_back(c.sequence);
    EXPECT_EQ(left, (std::vector<uint64_t>{2, 4}));  // 6 is gone: the run went back from it
  }
  // A version that is not there is refused; the folder stays as it was.
  o.restore_version = 6;
  EXPECT_EQ(ShardServer::Start(o).status().code(), absl::StatusCode::kNotFound);
  o.restore_version = -1;
  auto newest = ShardServer::Start(o);
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_EQ((*newest)->restored()->sequence, 4u);
  o.checkpoint_dir.clear();
  o.restore_version = 4;
  EXPECT_EQ(ShardServer::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
