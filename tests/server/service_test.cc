// The shard's gRPC service in-process: exact status codes for bad input, and that a rejected
// request leaves the weights unchanged.

#include "server/service.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "common/shm/shared_memory.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/shard_server.h"
#include "tests/support/test_shards.h"
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
    server_ = StartShardServer(SgdShardServer(ConsistencyMode::kAsp, 1));
    ASSERT_NE(server_, nullptr);
    stub_ = ps::v1::ParameterServer::NewStub(
        grpc::CreateChannel(LoopbackAddress(server_->port()), grpc::InsecureChannelCredentials()));
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

TEST_F(ServiceTest, ClientRegistersPullsAndPushesThroughAllShards) {
  GrpcClientOptions o = ClientOptionsFor({server_.get()}, kFp, 3);
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

TEST_F(ServiceTest, ClientFailsFastWhenAShardIsListedInTheWrongPlace) {
  // The same shard 0 twice: position 1 disagrees.
  const GrpcClientOptions o = ClientOptionsFor({server_.get(), server_.get()}, kFp, 3);
  auto client = GrpcParameterClient::Create(o);
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->Register(0, absl::Seconds(5)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A pull's reply is sent from the shard's weights (no snapshot copy): pushes that land while it
// is on its way must not show in it. Every value of a reply equals the version it reports
// (weights start at 0, each push adds 1).
TEST(ServiceLending, RepliesSentFromTheWeightsAreConsistentWhilePushesGoOn) {
  constexpr int64_t kTotal = 1 << 20;  // 4 MiB: long enough on the wire to overlap pushes
  ShardServerOptions so = SgdShardServer(ConsistencyMode::kAsp, 2);
  so.max_message_bytes = 64 << 20;
  std::unique_ptr<ShardServer> server = StartShardServer(so);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<GrpcParameterClient>> clients;
  for (int rank = 0; rank < 2; ++rank) {
    GrpcClientOptions o = ClientOptionsFor({server.get()}, kFp, kTotal);
    o.max_message_bytes = 64 << 20;
    o.shared_memory = false;
    auto client = GrpcParameterClient::Create(o);
    ASSERT_TRUE(client.ok()) << client.status();
    ASSERT_TRUE((*client)->Register(rank, absl::Seconds(5)).ok());
    clients.push_back(std::move(*client));
  }
  ASSERT_TRUE(clients[0]->Init(std::vector<float>(kTotal, 0.0f)).ok());
  constexpr int kPushes = 40;
  std::thread pusher([&] {
    const std::vector<float> minus_one(kTotal, -1.0f);
    for (int clock = 0; clock < kPushes; ++clock) {
      auto pushed = clients[0]->Push(clock, {0}, 1, minus_one);
      ASSERT_TRUE(pushed.ok()) << pushed.status();
    }
  });
  std::vector<float> w(kTotal);
  int64_t last_version = 0;
  for (int clock = 0; last_version < kPushes; ++clock) {
    auto pulled = clients[1]->Pull(clock, false, absl::MakeSpan(w));
    ASSERT_TRUE(pulled.ok()) << pulled.status();
    last_version = pulled->versions[0];
    const float expected = static_cast<float>(last_version);
    const auto wrong = std::find_if(w.begin(), w.end(), [&](float v) { return v != expected; });
    ASSERT_EQ(wrong, w.end()) << "value " << *wrong << " at " << (wrong - w.begin())
                              << " in a reply of version " << last_version;
  }
  pusher.join();
}

}  // namespace
}  // namespace ps
