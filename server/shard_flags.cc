#include "server/shard_flags.h"

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/cli/optimizer_flags.h"
#include "server/server_flags.h"

namespace ps {

absl::StatusOr<ShardOptions> ShardOptionsFromFlags(int shard_id, int num_shards, int num_workers) {
  ShardOptions s;
  s.shard_id = shard_id;
  s.num_shards = num_shards;
  s.consistency.num_workers = num_workers;
  ASSIGN_OR_RETURN(s.consistency.mode, ParseConsistencyMode(absl::GetFlag(FLAGS_mode)));
  s.consistency.staleness = absl::GetFlag(FLAGS_staleness);
  // A bound the mode would ignore: the run would not be the SSP run its flags suggest.
  if (s.consistency.staleness > 0 && s.consistency.mode != ConsistencyMode::kSsp) {
    return absl::InvalidArgumentError(absl::StrCat("--staleness ", s.consistency.staleness,
                                                   " applies to --mode ssp only, not ",
                                                   ConsistencyModeName(s.consistency.mode)));
  }
  s.consistency.backup_workers = absl::GetFlag(FLAGS_backup_workers);
  ASSIGN_OR_RETURN(s.update_rule.rule, ParseUpdateRule(absl::GetFlag(FLAGS_update_rule)));
  s.update_rule.dc_lambda = static_cast<float>(absl::GetFlag(FLAGS_dc_lambda));
  s.update_rule.drop_above = absl::GetFlag(FLAGS_drop_above);
  ASSIGN_OR_RETURN(s.optimizer, OptimizerOptionsFromFlags());
  ASSIGN_OR_RETURN(s.sparse_optimizer.kind,
                   ParseSparseOptimizerKind(absl::GetFlag(FLAGS_sparse_optimizer)));
  s.sparse_optimizer.lr = static_cast<float>(absl::GetFlag(FLAGS_sparse_lr));
  ASSIGN_OR_RETURN(s.sparse_memory.eviction, ParseEvictionPolicy(absl::GetFlag(FLAGS_eviction)));
  s.sparse_memory.capacity = absl::GetFlag(FLAGS_table_capacity);
  s.sparse_memory.admit_after = absl::GetFlag(FLAGS_admit_after);
  s.full_snapshot_every = absl::GetFlag(FLAGS_full_checkpoint_every);
  if (s.full_snapshot_every < 1) {
    return absl::InvalidArgumentError("--full_checkpoint_every must be >= 1");
  }
  if (absl::GetFlag(FLAGS_lease_ms) < 1) {
    return absl::InvalidArgumentError("--lease_ms must be >= 1");
  }
  s.lease = absl::Milliseconds(absl::GetFlag(FLAGS_lease_ms));
  // Read by ps_server's own options, beside the shard's, and checked here for the launcher too.
  if (!(absl::GetFlag(FLAGS_checkpoint_seconds) >= 0) ||
      absl::GetFlag(FLAGS_checkpoint_every) < 0) {
    return absl::InvalidArgumentError("--checkpoint_seconds and --checkpoint_every must be >= 0");
  }
  if (absl::GetFlag(FLAGS_fault_drop_push_reply_every) < 0) {
    return absl::InvalidArgumentError("--fault_drop_push_reply_every must be >= 0");
  }
  RETURN_IF_ERROR(ValidateShardOptions(s));
  return s;
}

}  // namespace ps
