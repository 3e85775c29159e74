#ifndef PS_SERVER_SHARD_FLAGS_H_
#define PS_SERVER_SHARD_FLAGS_H_

// A shard's options read from the flags of server/server_flags.cc and the optimizer's: one
// reading for ps_server, which runs a shard with them, and ps_launch, which checks them before it
// starts any process, so that a bad value exits 2 with nothing started. For main() files only.

#include "absl/status/statusor.h"
#include "server/shard.h"

namespace ps {

// The options of shard `shard_id` of `num_shards` in a job of `num_workers` workers, checked as
// Shard::Create checks them (ValidateShardOptions), and the other flags of server_flags.cc (the
// checkpoint frequency, the fault injection) checked too; INVALID_ARGUMENT naming what is wrong.
absl::StatusOr<ShardOptions> ShardOptionsFromFlags(int shard_id, int num_shards, int num_workers);

}  // namespace ps

#endif  // PS_SERVER_SHARD_FLAGS_H_
