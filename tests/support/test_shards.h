#ifndef PS_TESTS_SUPPORT_TEST_SHARDS_H_
#define PS_TESTS_SUPPORT_TEST_SHARDS_H_

// Shards as the tests set them up: their options, in-process servers on loopback, and the options
// of those servers' gRPC clients.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/shard_server.h"
#include "worker/grpc_parameter_client.h"

namespace ps {

// What a client dials for an in-process server listening on `port`.
std::string LoopbackAddress(int port);

// Shard `shard_id` of `num_shards` (0 of 1: the whole layout) for `workers` workers under
// `mode`, with plain SGD at lr 1, so that an update subtracts the gradient as it came.
ShardOptions SgdShard(ConsistencyMode mode, int workers, int shard_id = 0, int num_shards = 1);
// The same shard served on a free port of loopback.
ShardServerOptions SgdShardServer(ConsistencyMode mode, int workers, int shard_id = 0,
                                  int num_shards = 1);

// Starts a server; a failure fails the calling test, and the result is then null.
std::unique_ptr<ShardServer> StartShardServer(const ShardServerOptions& options);

// A client of `shards`, in shard order, for a layout of `total_params` parameters with
// `fingerprint`; its other options keep their defaults.
GrpcClientOptions ClientOptionsFor(const std::vector<const ShardServer*>& shards,
                                   uint64_t fingerprint, int64_t total_params);

// A client created with `options`, registered as rank 0 and with the shards initialized to
// `initial`; a failure of any of the three fails the calling test, and the result is then null.
std::unique_ptr<GrpcParameterClient> RegisteredClient(const GrpcClientOptions& options,
                                                      const std::vector<float>& initial);

}  // namespace ps

#endif  // PS_TESTS_SUPPORT_TEST_SHARDS_H_
