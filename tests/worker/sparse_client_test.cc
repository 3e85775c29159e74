// Sparse rows through the gRPC client and two real shard servers: keys routed to their owners
// and answered in the caller's order, pushes applied with the dense gradient, PushPull carrying
// both, and the client's refusals.

#include <vector>

#include "common/optim/sparse_table.h"
#include "gtest/gtest.h"
#include "server/shard_server.h"
#include "tests/support/test_shards.h"
#include "worker/grpc_parameter_client.h"
#include "worker/sparse_routing.h"

namespace ps {
namespace {

constexpr uint64_t kFp = 77;
const SparseTableSpec kTable{"embeddings", 2, 0.05f};

struct TwoShards {
  std::vector<std::unique_ptr<ShardServer>> servers;
  std::unique_ptr<GrpcParameterClient> client;
};

TwoShards Start(int64_t chunk_bytes = 0) {
  TwoShards t;
  for (int s = 0; s < 2; ++s) {
    ShardServerOptions so = SgdShardServer(ConsistencyMode::kAsp, 1, s, 2);
    so.shard.sparse_optimizer = {SparseOptimizerKind::kSgd, 1.0f};
    t.servers.push_back(StartShardServer(so));
    if (t.servers.back() == nullptr) return t;
  }
  GrpcClientOptions o = ClientOptionsFor({t.servers[0].get(), t.servers[1].get()}, kFp, 4);
  o.tables = {kTable};
  o.chunk_bytes = chunk_bytes;
  o.initial_backoff = absl::Milliseconds(1);
  t.client = RegisteredClient(o, {1, 2, 3, 4});
  return t;
}

std::vector<float> Initial(uint64_t key) {
  std::vector<float> row(2);
  SparseTable::InitialRow(kTable, key, row.data());
  return row;
}

// Keys owned by each shard of two, so a list of them crosses both.
std::vector<uint64_t> MixedKeys() {
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; keys.size() < 6; ++k) {
    if (ShardOfKey(k, 2) == static_cast<int>(keys.size() % 2)) keys.push_back(k);
  }
  return keys;
}

TEST(SparseClient, PullsRowsFromTheirOwnersInTheCallersOrder) {
  TwoShards t = Start();
  const std::vector<uint64_t> keys = MixedKeys();
  std::vector<float> values(keys.size() * 2), params(4);
  const RowsToPull rows{0, keys, absl::MakeSpan(values)};
  ASSERT_TRUE(t.client->PullWithRows(0, false, absl::MakeSpan(params), {&rows, 1}).ok());
  EXPECT_EQ(params, (std::vector<float>{1, 2, 3, 4}));
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(std::vector<float>(values.begin() + 2 * i, values.begin() + 2 * i + 2),
              Initial(keys[i]))
        << i;
  }
}

TEST(SparseClient, RowsAloneComeFromTheShardsThatOwnThemToObserversAndWorkers) {
  TwoShards t = Start();
  const std::vector<uint64_t> keys = MixedKeys();
  const std::vector<float> grads(keys.size() * 2, 0.5f);
  const RowsToPush push{0, keys, grads};
  ASSERT_TRUE(t.client->PushWithRows(0, {0, 0}, 1, std::vector<float>(4, 0.0f), {&push, 1}).ok());
  std::vector<float> values(keys.size() * 2);
  const RowsToPull rows{0, keys, absl::MakeSpan(values)};
  ASSERT_TRUE(t.client->PullRows(7, {&rows, 1}).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::vector<float> w0 = Initial(keys[i]);
    EXPECT_EQ(values[2 * i], w0[0] - 0.5f) << i;
    EXPECT_EQ(values[2 * i + 1], w0[1] - 0.5f) << i;
  }
  // Keys of one shard only: one call, to it.
  const std::vector<uint64_t> one = {keys[0]};
  std::vector<float> value(2);
  const RowsToPull single{0, one, absl::MakeSpan(value)};
  ASSERT_TRUE(t.client->PullRows(7, {&single, 1}).ok());
  EXPECT_EQ(value, std::vector<float>(values.begin(), values.begin() + 2));
  // The worker's own lookup of its step's rows alone (PullStepRows) reads the same values.
  std::vector<float> looked_up(keys.size() * 2);
  const RowsToPull step_rows{0, keys, absl::MakeSpan(looked_up)};
  ASSERT_TRUE(t.client->PullStepRows(1, {&step_rows, 1}).ok());
  EXPECT_EQ(looked_up, values);
}

TEST(SparseClient, PushedRowsAreAppliedAndPushPullCarriesBoth) {
  TwoShards t = Start();
  const std::vector<uint64_t> keys = MixedKeys();
  std::vector<float> grads(keys.size() * 2);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.5f * static_cast<float>(i);
  const RowsToPush push{0, keys, grads};
  std::vector<float> values(keys.size() * 2), params(4);
  const RowsToPull pull{0, keys, absl::MakeSpan(values)};
  auto both = t.client->PushPullWithRows(0, {0, 0}, 1, std::vector<float>(4, 1.0f), {&push, 1}, 1,
                                         absl::MakeSpan(params), {&pull, 1});
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->pushed.applied, 2);
  EXPECT_EQ(params, (std::vector<float>{0, 1, 2, 3}));
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::vector<float> w0 = Initial(keys[i]);
    EXPECT_EQ(values[2 * i], w0[0] - grads[2 * i]) << i;
    EXPECT_EQ(values[2 * i + 1], w0[1] - grads[2 * i + 1]) << i;
  }
  // And a plain push of rows, then a pull.
  ASSERT_TRUE(t.client->PushWithRows(1, {1, 1}, 1, std::vector<float>(4, 0.0f), {&push, 1}).ok());
  ASSERT_TRUE(t.client->PullWithRows(2, false, absl::MakeSpan(params), {&pull, 1}).ok());
  EXPECT_EQ(values[0], Initial(keys[0])[0] - 2 * grads[0]);
}

TEST(SparseClient, RefusesRowsThatDoNotFit) {
  TwoShards t = Start();
  const std::vector<uint64_t> keys = {1, 2};
  std::vector<float> three(3), params(4);
  const RowsToPull short_values{0, keys, absl::MakeSpan(three)};
  EXPECT_EQ(
      t.client->PullWithRows(0, false, absl::MakeSpan(params), {&short_values, 1}).status().code(),
      absl::StatusCode::kInvalidArgument);
  std::vector<float> four(4);
  const RowsToPull unknown{1, keys, absl::MakeSpan(four)};
  EXPECT_EQ(t.client->PullWithRows(0, false, absl::MakeSpan(params), {&unknown, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Chunked pushes cannot carry rows (the shards stage chunks as pieces).
  TwoShards chunked = Start(/*chunk_bytes=*/4);
  const RowsToPush push{0, keys, four};
  EXPECT_EQ(chunked.client->PushWithRows(0, {0, 0}, 1, std::vector<float>(4, 0.0f), {&push, 1})
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ps
