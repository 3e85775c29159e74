// The shard's gRPC service in-process: exact status codes for bad input, and that a rejected
// request leaves the weights unchanged.

#include "server/service.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "common/shared_memory.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/shard_server.h"
#include "worker/grpc_parameter_client.h"

namespace ps {
namespace {

constexpr uint64_t kFp = 42;

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

class ServiceTest : public testing::Test {
 protected:
  void SetUp() override {
    ShardServerOptions o;
    o.shard.consistency.mode = ConsistencyMode::kAsp;
    o.shard.consistency.num_workers = 1;
    o.shard.optimizer.lr = 1.0f;
    auto s = ShardServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    stub_ = ps::v1::ParameterServer::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials()));
    ps::v1::InitRequest init;
    init.set_layout_fingerprint(kFp);
    init.set_total_params(3);
    init.set_begin(0);
    init.set_end(3);
    init.set_values(Bytes({1, 2, 3}));
    ps::v1::InitResponse init_resp;
    ASSERT_TRUE(Call(&ps::v1::ParameterServer::Stub::Init, init, &init_resp).ok());
    ps::v1::RegisterRequest reg;
    reg.set_rank(0);
    reg.set_layout_fingerprint(kFp);
    ps::v1::RegisterResponse reg_resp;
    ASSERT_TRUE(Call(&ps::v1::ParameterServer::Stub::Register, reg, &reg_resp).ok());
  }

  template <typename Req, typename Resp>
  grpc::Status Call(grpc::Status (ps::v1::ParameterServer::Stub::*method)(grpc::ClientContext*,
                                                                          const Req&, Resp*),
                    const Req& req, Resp* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return (stub_.get()->*method)(&ctx, req, resp);
  }

  ps::v1::PushRequest GoodPush() {
    ps::v1::PushRequest p;
    p.set_rank(0);
    p.set_layout_fingerprint(kFp);
    p.set_begin(0);
    p.set_end(3);
    p.set_clock(0);
    p.set_base_version(0);
    p.set_gradient(Bytes({1, 1, 1}));
    return p;
  }

  // GoodPush's gradient in field 3, and the pull of the next clock over the same keys.
  ps::v1::PushPullRequest GoodPushPull() {
    ps::v1::PushPullRequest req;
    *req.mutable_push() = GoodPush();
    req.mutable_push()->clear_gradient();
    req.set_gradient(Bytes({1, 1, 1}));
    req.mutable_pull()->set_begin(0);
    req.mutable_pull()->set_end(3);
    req.mutable_pull()->set_clock(1);
    return req;
  }

  // An observer's read of keys [begin, end).
  std::vector<float> Weights(int64_t begin = 0, int64_t end = 3, int64_t* version = nullptr) {
    ps::v1::PullRequest req;
    req.set_layout_fingerprint(kFp);
    req.set_begin(begin);
    req.set_end(end);
    req.set_no_wait(true);
    ps::v1::PullResponse resp;
    EXPECT_TRUE(Call(&ps::v1::ParameterServer::Stub::Pull, req, &resp).ok());
    std::vector<float> w(resp.values().size() / sizeof(float));
    std::memcpy(w.data(), resp.values().data(), resp.values().size());
    if (version != nullptr) *version = resp.version();
    return w;
  }

  grpc::StatusCode PushCode(const ps::v1::PushRequest& p) {
    ps::v1::PushResponse resp;
    return Call(&ps::v1::ParameterServer::Stub::Push, p, &resp).error_code();
  }

  std::unique_ptr<ShardServer> server_;
  std::unique_ptr<ps::v1::ParameterServer::Stub> stub_;
};

TEST_F(ServiceTest, WrongFingerprintIsFailedPreconditionAndChangesNothing) {
  auto p = GoodPush();
  p.set_layout_fingerprint(kFp + 1);
  EXPECT_EQ(PushCode(p), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Weights(), (std::vector<float>{1, 2, 3}));
}

TEST_F(ServiceTest, WrongSliceLengthIsInvalidArgumentAndChangesNothing) {
  auto p = GoodPush();
  p.set_gradient(Bytes({1, 1}));
  EXPECT_EQ(PushCode(p), grpc::StatusCode::INVALID_ARGUMENT);
  p.set_gradient(std::string(11, '\0'));  // not a whole number of floats
  EXPECT_EQ(PushCode(p), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Weights(), (std::vector<float>{1, 2, 3}));
}

TEST_F(ServiceTest, NanGradientIsInvalidArgumentCountedAndChangesNothing) {
  auto p = GoodPush();
  p.set_gradient(Bytes({1, std::numeric_limits<float>::quiet_NaN(), 1}));
  EXPECT_EQ(PushCode(p), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Weights(), (std::vector<float>{1, 2, 3}));
  ps::v1::GetStatusResponse status;
  ASSERT_TRUE(
      Call(&ps::v1::ParameterServer::Stub::GetStatus, ps::v1::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.rejected_nonfinite(), 1);
  EXPECT_EQ(status.version(), 0);
}

TEST_F(ServiceTest, UnknownRangeIsFailedPreconditionMalformedRangeInvalidArgument) {
  auto p = GoodPush();
  p.set_begin(1);
  p.set_end(4);
  EXPECT_EQ(PushCode(p), grpc::StatusCode::FAILED_PRECONDITION);
  p.set_begin(3);
  p.set_end(1);
  EXPECT_EQ(PushCode(p), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Weights(), (std::vector<float>{1, 2, 3}));
}

// Found by the fuzzer: a pull naming a huge range once made the server allocate it before the
// shard refused the range.
TEST_F(ServiceTest, PullOfAHugeForeignRangeIsRefusedWithoutAllocatingIt) {
  ps::v1::PullRequest req;
  req.set_layout_fingerprint(kFp);
  req.set_begin(0);
  req.set_end(int64_t{1} << 40);  // 4 TiB of floats
  req.set_no_wait(true);
  ps::v1::PullResponse resp;
  EXPECT_EQ(Call(&ps::v1::ParameterServer::Stub::Pull, req, &resp).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(resp.values().empty());
  EXPECT_EQ(Weights(), (std::vector<float>{1, 2, 3}));
}

TEST_F(ServiceTest, GoodPushIsAppliedAndItsRetryIsADuplicate) {
  ps::v1::PushResponse resp;
  ASSERT_TRUE(Call(&ps::v1::ParameterServer::Stub::Push, GoodPush(), &resp).ok());
  EXPECT_TRUE(resp.applied());
  ASSERT_TRUE(Call(&ps::v1::ParameterServer::Stub::Push, GoodPush(), &resp).ok());
  EXPECT_TRUE(resp.duplicate());
  EXPECT_EQ(Weights(), (std::vector<float>{0, 1, 2}));
}

// PushPull from a plain protobuf client: the push is applied, then the pull answered with the
// weights after it, in one call; its retry finds the push a duplicate and pulls the same values.
TEST_F(ServiceTest, PushPullAppliesThePushThenAnswersThePull) {
  const ps::v1::PushPullRequest req = GoodPushPull();
  for (bool retry : {false, true}) {
    ps::v1::PushPullResponse resp;
    ASSERT_TRUE(Call(&ps::v1::ParameterServer::Stub::PushPull, req, &resp).ok());
    EXPECT_EQ(resp.push().applied(), !retry);
    EXPECT_EQ(resp.push().duplicate(), retry);
    EXPECT_EQ(resp.push().version(), 1);
    EXPECT_EQ(resp.pull().version(), 1);
    EXPECT_FALSE(resp.pull().in_shared_memory());
    EXPECT_TRUE(resp.pull().values().empty());  // the values are field 3
    EXPECT_EQ(resp.values(), Bytes({0, 1, 2}));
  }
  EXPECT_EQ(Weights(), (std::vector<float>{0, 1, 2}));
}

TEST_F(ServiceTest, BadPushPullsAreRefusedAndChangeNothing) {
  const ps::v1::PushPullRequest good = GoodPushPull();
  const auto code = [&](const ps::v1::PushPullRequest& req) {
    ps::v1::PushPullResponse resp;
    return Call(&ps::v1::ParameterServer::Stub::PushPull, req, &resp).error_code();
  };
  auto other_worker = good;
  other_worker.mutable_pull()->set_rank(1);
  EXPECT_EQ(code(other_worker), grpc::StatusCode::INVALID_ARGUMENT);
  auto other_model = good;
  other_model.mutable_pull()->set_layout_fingerprint(kFp + 1);
  EXPECT_EQ(code(other_model), grpc::StatusCode::INVALID_ARGUMENT);
  auto other_keys = good;
  other_keys.mutable_pull()->set_begin(1);
  EXPECT_EQ(code(other_keys), grpc::StatusCode::INVALID_ARGUMENT);
  auto observer = good;
  observer.mutable_pull()->set_no_wait(true);
  EXPECT_EQ(code(observer), grpc::StatusCode::INVALID_ARGUMENT);
  auto gradient_inside = good;
  gradient_inside.mutable_push()->set_gradient(Bytes({1, 1, 1}));
  EXPECT_EQ(code(gradient_inside), grpc::StatusCode::INVALID_ARGUMENT);
  auto topk_weights = good;
  topk_weights.mutable_pull()->set_encoding(ps::v1::TOPK);
  EXPECT_EQ(code(topk_weights), grpc::StatusCode::INVALID_ARGUMENT);
  auto short_gradient = good;
  short_gradient.set_gradient(Bytes({1, 1}));
  EXPECT_EQ(code(short_gradient), grpc::StatusCode::INVALID_ARGUMENT);
  auto wrong_model = good;  // the push's own check; the pull's fields follow the push's
  wrong_model.mutable_push()->set_layout_fingerprint(kFp + 1);
  EXPECT_EQ(code(wrong_model), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Weights(), (std::vector<float>{1, 2, 3}));
}

// Pieces on the wire, from a plain protobuf client: a push of part of the range is `staged`, the
// one completing the step is applied, and an overlapping one is refused; a pull may read a part.
TEST_F(ServiceTest, PiecesOfAPushAreStagedThenAppliedAndAPartCanBePulled) {
  auto head = GoodPush();
  head.set_end(1);
  head.set_gradient(Bytes({1}));
  ps::v1::PushResponse resp;
  ASSERT_TRUE(Call(&ps::v1::ParameterServer::Stub::Push, head, &resp).ok());
  EXPECT_TRUE(resp.staged());
  EXPECT_FALSE(resp.applied());
  auto overlapping = GoodPush();
  overlapping.set_end(2);
  overlapping.set_gradient(Bytes({1, 1}));
  EXPECT_EQ(PushCode(overlapping), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Weights(), (std::vector<float>{1, 2, 3}));
  auto tail = GoodPush();
  tail.set_begin(1);
  tail.set_gradient(Bytes({2, 2}));
  ASSERT_TRUE(Call(&ps::v1::ParameterServer::Stub::Push, tail, &resp).ok());
  EXPECT_FALSE(resp.staged());
  EXPECT_TRUE(resp.applied());
  EXPECT_EQ(resp.version(), 1);
  EXPECT_EQ(Weights(), (std::vector<float>{0, 0, 1}));

  int64_t version = 0;
  EXPECT_EQ(Weights(2, 3, &version), (std::vector<float>{1}));
  EXPECT_EQ(version, 1);
  ps::v1::GetStatusResponse status;
  ASSERT_TRUE(
      Call(&ps::v1::ParameterServer::Stub::GetStatus, ps::v1::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.pieces_received(), 2);
  EXPECT_EQ(status.pushes_accepted(), 1);
}

// Shared memory from a plain protobuf client: the region is this test process's (the shard runs
// in it too, which is the same path as another process on the host).
class SharedMemoryServiceTest : public ServiceTest {
 protected:
  static constexpr uint64_t kIncarnation = 7;
  void SetUp() override {
    ServiceTest::SetUp();
    ps::v1::RegisterRequest reg;
    reg.set_rank(0);
    reg.set_layout_fingerprint(kFp);
    reg.set_incarnation(kIncarnation);
    ps::v1::RegisterResponse reg_resp;
    ASSERT_TRUE(Call(&ps::v1::ParameterServer::Stub::Register, reg, &reg_resp).ok());
    auto region = SharedMemory::Create(8 * 3);
    ASSERT_TRUE(region.ok()) << region.status();
    region_ = std::move(*region);
  }
  ps::v1::AttachSharedMemoryRequest Attach() const {
    ps::v1::AttachSharedMemoryRequest a;
    a.set_rank(0);
    a.set_incarnation(kIncarnation);
    a.set_pid(region_->pid());
    a.set_fd(region_->fd());
    a.set_nonce(region_->nonce());
    a.set_total_params(3);
    return a;
  }
  grpc::StatusCode AttachCode(const ps::v1::AttachSharedMemoryRequest& a) {
    ps::v1::AttachSharedMemoryResponse resp;
    return Call(&ps::v1::ParameterServer::Stub::AttachSharedMemory, a, &resp).error_code();
  }
  // The gradient area holds `g`; the push names its bytes instead of carrying them.
  ps::v1::PushRequest SharedPush(const std::vector<float>& g) {
    std::memcpy(region_->data(), g.data(), g.size() * sizeof(float));
    ps::v1::PushRequest p = GoodPush();
    p.set_incarnation(kIncarnation);
    p.clear_gradient();
    p.set_shared_bytes(static_cast<int64_t>(g.size() * sizeof(float)));
    return p;
  }
  // Worker 0's pull of clock 1's keys [begin, end) into its region's weights area.
  ps::v1::PullRequest SharedPull(int64_t begin, int64_t end) const {
    ps::v1::PullRequest pull;
    pull.set_rank(0);
    pull.set_incarnation(kIncarnation);
    pull.set_layout_fingerprint(kFp);
    pull.set_begin(begin);
    pull.set_end(end);
    pull.set_clock(1);
    pull.set_into_shared_memory(true);
    return pull;
  }
  std::vector<float> WeightsArea() const {
    std::vector<float> w(3);
    std::memcpy(w.data(), region_->data() + 12, 12);
    return w;
  }
  int64_t SharedPayloads() {
    ps::v1::GetStatusResponse status;
    EXPECT_TRUE(
        Call(&ps::v1::ParameterServer::Stub::GetStatus, ps::v1::GetStatusRequest(), &status).ok());
    return status.shared_memory_payloads();
  }
  std::unique_ptr<SharedMemory> region_;
};

TEST_F(SharedMemoryServiceTest, PushAndPullMovePayloadsThroughTheRegion) {
  ASSERT_EQ(AttachCode(Attach()), grpc::StatusCode::OK);
  ASSERT_EQ(AttachCode(Attach()), grpc::StatusCode::OK);  // a retry
  ps::v1::PushResponse resp;
  ASSERT_TRUE(Call(&ps::v1::ParameterServer::Stub::Push, SharedPush({1, 1, 1}), &resp).ok());
  EXPECT_TRUE(resp.applied());
  EXPECT_EQ(Weights(), (std::vector<float>{0, 1, 2}));

  const ps::v1::PullRequest pull = SharedPull(1, 3);
  ps::v1::PullResponse pulled;
  ASSERT_TRUE(Call(&ps::v1::ParameterServer::Stub::Pull, pull, &pulled).ok());
  EXPECT_TRUE(pulled.in_shared_memory());
  EXPECT_TRUE(pulled.values().empty());
  EXPECT_EQ(pulled.version(), 1);
  EXPECT_EQ(WeightsArea(), (std::vector<float>{0, 1, 2}));  // element 0 was not asked for
  EXPECT_EQ(SharedPayloads(), 2);
  ps::v1::GetStatusResponse status;
  ASSERT_TRUE(
      Call(&ps::v1::ParameterServer::Stub::GetStatus, ps::v1::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.shared_memory_workers(), 1);
}

TEST_F(SharedMemoryServiceTest, BadSharedPushesAreRefusedAndChangeNothing) {
  // Not attached (yet): register again, the usual answer to a lost attachment.
  EXPECT_EQ(PushCode(SharedPush({1, 1, 1})), grpc::StatusCode::ABORTED);
  ASSERT_EQ(AttachCode(Attach()), grpc::StatusCode::OK);
  auto too_long = SharedPush({1, 1, 1});
  too_long.set_shared_bytes(16);
  EXPECT_EQ(PushCode(too_long), grpc::StatusCode::INVALID_ARGUMENT);
  auto not_whole = SharedPush({1, 1, 1});
  not_whole.set_shared_bytes(11);
  EXPECT_EQ(PushCode(not_whole), grpc::StatusCode::INVALID_ARGUMENT);
  auto both = SharedPush({1, 1, 1});
  both.set_gradient(Bytes({1, 1, 1}));
  EXPECT_EQ(PushCode(both), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(PushCode(SharedPush({1, std::numeric_limits<float>::infinity(), 1})),
            grpc::StatusCode::INVALID_ARGUMENT);
  auto other_process = SharedPush({1, 1, 1});
  other_process.set_incarnation(kIncarnation + 1);
  EXPECT_EQ(PushCode(other_process), grpc::StatusCode::ABORTED);
  EXPECT_EQ(Weights(), (std::vector<float>{1, 2, 3}));
  // A new process at the rank drops the old one's region.
  ps::v1::RegisterRequest reg;
  reg.set_rank(0);
  reg.set_layout_fingerprint(kFp);
  reg.set_incarnation(kIncarnation + 1);
  ps::v1::RegisterResponse reg_resp;
  ASSERT_TRUE(Call(&ps::v1::ParameterServer::Stub::Register, reg, &reg_resp).ok());
  auto replaced = SharedPush({1, 1, 1});
  replaced.set_incarnation(kIncarnation + 1);
  EXPECT_EQ(PushCode(replaced), grpc::StatusCode::ABORTED);
  EXPECT_EQ(Weights(), (std::vector<float>{1, 2, 3}));
}

TEST_F(SharedMemoryServiceTest, PushPullMovesBothPayloadsThroughTheRegion) {
  ps::v1::PushPullRequest req;
  *req.mutable_push() = SharedPush({1, 1, 1});
  req.mutable_pull()->set_begin(0);
  req.mutable_pull()->set_end(3);
  req.mutable_pull()->set_clock(1);
  req.mutable_pull()->set_into_shared_memory(true);
  ps::v1::PushPullResponse resp;
  // Not attached: the pull could not be answered, so the push is not applied either.
  EXPECT_EQ(Call(&ps::v1::ParameterServer::Stub::PushPull, req, &resp).error_code(),
            grpc::StatusCode::ABORTED);
  EXPECT_EQ(Weights(), (std::vector<float>{1, 2, 3}));
  ASSERT_EQ(AttachCode(Attach()), grpc::StatusCode::OK);
  ASSERT_TRUE(Call(&ps::v1::ParameterServer::Stub::PushPull, req, &resp).ok());
  EXPECT_TRUE(resp.push().applied());
  EXPECT_TRUE(resp.pull().in_shared_memory());
  EXPECT_TRUE(resp.values().empty());
  EXPECT_EQ(WeightsArea(), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(SharedPayloads(), 2);
}

// A region of two slots: slot 1's areas follow slot 0's; a slot outside the region is refused
// and changes nothing.
TEST_F(SharedMemoryServiceTest, SlotsAddressTheirOwnAreas) {
  auto two = SharedMemory::Create(2 * 8 * 3);
  ASSERT_TRUE(two.ok()) << two.status();
  region_ = std::move(*two);
  auto attach = Attach();
  attach.set_slots(2);
  ASSERT_EQ(AttachCode(attach), grpc::StatusCode::OK);
  const std::vector<float> g = {1, 1, 1};
  std::memcpy(region_->data() + 24, g.data(), 12);  // slot 1's gradient area
  auto push = SharedPush({9, 9, 9});                // slot 0's: not read
  push.set_shared_slot(2);
  EXPECT_EQ(PushCode(push), grpc::StatusCode::INVALID_ARGUMENT);
  push.set_shared_slot(-1);
  EXPECT_EQ(PushCode(push), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Weights(), (std::vector<float>{1, 2, 3}));
  push.set_shared_slot(1);
  EXPECT_EQ(PushCode(push), grpc::StatusCode::OK);
  EXPECT_EQ(Weights(), (std::vector<float>{0, 1, 2}));

  ps::v1::PullRequest pull = SharedPull(0, 3);
  pull.set_shared_slot(2);
  ps::v1::PullResponse pulled;
  EXPECT_EQ(Call(&ps::v1::ParameterServer::Stub::Pull, pull, &pulled).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  pull.set_shared_slot(1);
  ASSERT_TRUE(Call(&ps::v1::ParameterServer::Stub::Pull, pull, &pulled).ok());
  std::vector<float> slot1_weights(3), slot0_weights(3);
  std::memcpy(slot1_weights.data(), region_->data() + 36, 12);
  std::memcpy(slot0_weights.data(), region_->data() + 12, 12);
  EXPECT_EQ(slot1_weights, (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(slot0_weights, (std::vector<float>{0, 0, 0}));
  // More slots than the region holds (its size differs: not that region), or than a region may
  // have.
  attach.set_slots(3);
  EXPECT_EQ(AttachCode(attach), grpc::StatusCode::FAILED_PRECONDITION);
  attach.set_slots(kMaxSharedSlots + 1);
  EXPECT_EQ(AttachCode(attach), grpc::StatusCode::INVALID_ARGUMENT);
  attach.set_slots(-1);
  EXPECT_EQ(AttachCode(attach), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(SharedMemoryServiceTest, AttachRefusesWhatItCannotMapOrTrust) {
  auto wrong_nonce = Attach();
  wrong_nonce.set_nonce(region_->nonce() + 1);
  EXPECT_EQ(AttachCode(wrong_nonce), grpc::StatusCode::FAILED_PRECONDITION);
  auto wrong_size = Attach();
  wrong_size.set_total_params(4);
  EXPECT_EQ(AttachCode(wrong_size), grpc::StatusCode::FAILED_PRECONDITION);
  auto stale_process = Attach();
  stale_process.set_incarnation(kIncarnation + 1);
  EXPECT_EQ(AttachCode(stale_process), grpc::StatusCode::ABORTED);
  auto anonymous = Attach();
  anonymous.set_incarnation(0);
  EXPECT_EQ(AttachCode(anonymous), grpc::StatusCode::INVALID_ARGUMENT);
  auto no_params = Attach();
  no_params.set_total_params(0);
  EXPECT_EQ(AttachCode(no_params), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(PushCode(SharedPush({1, 1, 1})), grpc::StatusCode::ABORTED);
}

// One ASP shard of 3 parameters (SGD, lr 1) and a client, registered with it and having
// initialised it to {1, 2, 3} unless `register_and_init` is false.
struct OneShardOptions {
  bool register_and_init = true;
  bool accept_shared_memory = true;  // the shard's
  bool shared_memory = true;         // the client's
  int shared_memory_slots = 1;
  int64_t chunk_bytes = 0;        // 0: one call per shard
  int drop_push_reply_every = 0;  // fault injection on the shard
};
struct OneShard {
  std::unique_ptr<ShardServer> server;
  std::unique_ptr<GrpcParameterClient> client;
};
OneShard StartOneShard(const OneShardOptions& options) {
  ShardServerOptions so;
  so.shard.consistency.mode = ConsistencyMode::kAsp;
  so.shard.consistency.num_workers = 1;
  so.shard.optimizer.lr = 1.0f;
  so.accept_shared_memory = options.accept_shared_memory;
  so.drop_push_reply_every = options.drop_push_reply_every;
  auto server = ShardServer::Start(so);
  EXPECT_TRUE(server.ok()) << server.status();
  GrpcClientOptions o;
  o.servers = {"127.0.0.1:" + std::to_string((*server)->port())};
  o.fingerprint = kFp;
  o.total_params = 3;
  o.shared_memory = options.shared_memory;
  o.shared_memory_slots = options.shared_memory_slots;
  o.chunk_bytes = options.chunk_bytes;
  o.initial_backoff = absl::Milliseconds(1);
  auto client = GrpcParameterClient::Create(o);
  EXPECT_TRUE(client.ok());
  if (options.register_and_init) {
    EXPECT_TRUE((*client)->Register(0, absl::Seconds(10)).ok());
    EXPECT_TRUE((*client)->Init(std::vector<float>{1, 2, 3}).ok());
  }
  return OneShard{std::move(*server), std::move(*client)};
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

TEST_F(ServiceTest, ClientRegistersPullsAndPushesThroughAllShards) {
  GrpcClientOptions o;
  o.servers = {"127.0.0.1:" + std::to_string(server_->port())};
  o.fingerprint = kFp;
  o.total_params = 3;
  auto client = GrpcParameterClient::Create(o);
  ASSERT_TRUE(client.ok());
  auto info = (*client)->Register(0, absl::Seconds(5));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->mode, ConsistencyMode::kAsp);
  EXPECT_TRUE(info->initialized);
  std::vector<float> w(3);
  auto pulled = (*client)->Pull(0, false, absl::MakeSpan(w));
  ASSERT_TRUE(pulled.ok());
  EXPECT_EQ(w, (std::vector<float>{1, 2, 3}));
  const std::vector<float> g = {0.5f, 0.5f, 0.5f};
  auto pushed = (*client)->Push(0, pulled->versions, 1, g);
  ASSERT_TRUE(pushed.ok());
  EXPECT_EQ(pushed->applied, 1);
  EXPECT_EQ(Weights(), (std::vector<float>{0.5f, 1.5f, 2.5f}));
  // A client built for another model is refused.
  o.fingerprint = kFp + 1;
  auto other = GrpcParameterClient::Create(o);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)->Register(0, absl::Seconds(5)).status().code(),
            absl::StatusCode::kFailedPrecondition);
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
  GrpcClientOptions o;
  for (int s = 0; s < 2; ++s) {
    two.servers.push_back(StartShardOfTwo(s, 0));
    two.ports.push_back(two.servers.back()->port());
    o.servers.push_back("127.0.0.1:" + std::to_string(two.ports.back()));
  }
  o.fingerprint = kFp;
  o.total_params = 4;
  o.shared_memory = false;
  o.initial_backoff = absl::Milliseconds(20);
  o.report_unreachable_every = absl::Milliseconds(300);
  auto client = GrpcParameterClient::Create(o);
  EXPECT_TRUE(client.ok());
  two.client = std::move(*client);
  EXPECT_TRUE(two.client->Register(0, absl::Seconds(10)).ok());
  EXPECT_TRUE(two.client->Init(std::vector<float>{1, 2, 3, 4}).ok());
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
  ShardServerOptions so;
  so.shard.consistency.mode = ConsistencyMode::kBsp;
  so.shard.consistency.num_workers = 2;
  so.shard.lease = absl::Seconds(30);
  auto server = ShardServer::Start(so);
  ASSERT_TRUE(server.ok()) << server.status();
  GrpcClientOptions o;
  o.servers = {"127.0.0.1:" + std::to_string((*server)->port())};
  o.fingerprint = kFp;
  o.total_params = 3;
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

TEST_F(ServiceTest, ClientFailsFastWhenAShardIsListedInTheWrongPlace) {
  GrpcClientOptions o;
  const std::string addr = "127.0.0.1:" + std::to_string(server_->port());
  o.servers = {addr, addr};  // the same shard 0 twice: position 1 disagrees
  o.fingerprint = kFp;
  o.total_params = 3;
  auto client = GrpcParameterClient::Create(o);
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->Register(0, absl::Seconds(5)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ps
