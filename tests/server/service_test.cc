// The shard's gRPC service in-process: exact status codes for bad input, and that a rejected
// request leaves the weights unchanged.

#include "server/service.h"

#include <cmath>
#include <cstring>
#include <limits>

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

TEST_F(ServiceTest, ClientRegistersPullsAndPushesThroughAllShards) {
  GrpcClientOptions o;
  o.servers = {"127.0.0.1:" + std::to_string(server_->port())};
  o.fingerprint = kFp;
  o.total_params = 3;
  auto client = GrpcParameterClient::Create(o);
  ASSERT_TRUE(client.ok());
  auto info = (*client)->Register(0, absl::Seconds(5));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->mode, "asp");
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
