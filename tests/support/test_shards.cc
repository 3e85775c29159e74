#include "tests/support/test_shards.h"

#include "gtest/gtest.h"

namespace ps {

std::string LoopbackAddress(int port) { return "127.0.0.1:" + std::to_string(port); }

ShardOptions SgdShard(ConsistencyMode mode, int workers, int shard_id, int num_shards) {
  ShardOptions o;
  o.shard_id = shard_id;
  o.num_shards = num_shards;
  o.consistency.mode = mode;
  o.consistency.num_workers = workers;
  o.optimizer.kind = OptimizerKind::kSgd;
  o.optimizer.lr = 1.0f;
  return o;
}

ShardServerOptions SgdShardServer(ConsistencyMode mode, int workers, int shard_id, int num_shards) {
  ShardServerOptions o;
  o.shard = SgdShard(mode, workers, shard_id, num_shards);
  return o;
}

std::unique_ptr<ShardServer> StartShardServer(const ShardServerOptions& options) {
  absl::StatusOr<std::unique_ptr<ShardServer>> server = ShardServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

GrpcClientOptions ClientOptionsFor(const std::vector<const ShardServer*>& shards,
                                   uint64_t fingerprint, int64_t total_params) {
  GrpcClientOptions o;
  for (const ShardServer* shard : shards) o.servers.push_back(LoopbackAddress(shard->port()));
  o.fingerprint = fingerprint;
  o.total_params = total_params;
  return o;
}

std::unique_ptr<GrpcParameterClient> RegisteredClient(const GrpcClientOptions& options,
                                                      const std::vector<float>& initial) {
  absl::StatusOr<std::unique_ptr<GrpcParameterClient>> client =
      GrpcParameterClient::Create(options);
  EXPECT_TRUE(client.ok()) << client.status();
  if (!client.ok()) return nullptr;
  const absl::Status registered = (*client)->Register(0, absl::Seconds(10)).status();
  EXPECT_TRUE(registered.ok()) << registered;
  if (!registered.ok()) return nullptr;
  const absl::Status initialized = (*client)->Init(initial);
  EXPECT_TRUE(initialized.ok()) << initialized;
  return initialized.ok() ? *std::move(client) : nullptr;
}

}  // namespace ps
