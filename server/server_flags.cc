#include "server/server_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, mode, "bsp", "Consistency mode: bsp, ssp or asp.");
ABSL_FLAG(int32_t, staleness, 0, "SSP bound s: a pull for step c waits until min clock >= c-s.");
ABSL_FLAG(std::string, update_rule, "plain",
          "Stale gradients (SSP/ASP): plain, staleness_lr (lr / (staleness + 1)), dc_asgd (delay "
          "compensation, --dc_lambda) or drop (refuse staleness > --drop_above).");
ABSL_FLAG(double, dc_lambda, 0.04, "DC-ASGD's lambda.");
ABSL_FLAG(int64_t, drop_above, 4, "--update_rule drop: the largest staleness still applied.");
ABSL_FLAG(int32_t, backup_workers, 0,
          "BSP: apply each round once all but this many workers have pushed; later pushes of "
          "the round are counted, not applied.");
ABSL_FLAG(std::string, sparse_optimizer, "adagrad",
          "Row-wise optimizer of sparse tables' rows: adagrad, adam (lazy: touched rows only) or "
          "sgd; each row keeps its own state.");
ABSL_FLAG(double, sparse_lr, 0.01, "Learning rate of the sparse tables' rows.");
ABSL_FLAG(int64_t, table_capacity, 0,
          "Rows each sparse table may hold on this shard (0: no limit); a full table evicts "
          "one (--eviction) for each new row.");
ABSL_FLAG(std::string, eviction, "lfu",
          "Which row a full table evicts: lfu (the least often updated of 8 sampled rows) or "
          "lru (the least recently updated).");
ABSL_FLAG(int32_t, admit_after, 0,
          "A key gets a row of its own at its Nth gradient; before, it reads as zeros and its "
          "gradients are dropped and counted (0 or 1: at the first).");
ABSL_FLAG(int32_t, full_checkpoint_every, 10,
          "With sparse tables, every Nth checkpoint is full; those between hold the rows changed "
          "since the last full one (1: all full).");
ABSL_FLAG(int64_t, lease_ms, 10000, "A worker silent this long leaves the barrier set.");
ABSL_FLAG(int64_t, checkpoint_every, 0,
          "Checkpoint every this many updates (0: not by count). Under BSP every shard then "
          "checkpoints at the same clock: a consistent cut.");
ABSL_FLAG(double, checkpoint_seconds, 0,
          "SSP/ASP: also checkpoint every this many seconds when the version moved (0: never).");
ABSL_FLAG(int32_t, fault_drop_push_reply_every, 0,
          "Fault injection for tests: answer every Nth accepted push with UNAVAILABLE, as if "
          "the reply were lost (0: off).");
