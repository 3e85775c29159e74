#ifndef PS_WORKER_PARAMETER_CLIENT_H_
#define PS_WORKER_PARAMETER_CLIENT_H_

// The worker's view of the parameter servers: one object that talks to all S shards, each call
// covering the whole flat buffer (every shard's range, concurrently). The trainer sees only this
// interface, so tests can run it against an in-process fake.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/base/consistency_mode.h"
#include "common/base/param_layout.h"
#include "common/base/status_macros.h"
#include "common/optim/sparse_table.h"

namespace ps {

struct ClusterInfo {
  int num_shards = 0;
  int num_workers = 0;
  ConsistencyMode mode = ConsistencyMode::kBsp;
  int staleness = 0;
  int64_t resume_clock = 0;  // the smallest clock the shards hold for this worker
  bool initialized = false;  // every shard has been initialised
  // Some shard's job had finished when this worker registered: nothing is left to train.
  bool job_finished = false;
  absl::Duration lease;  // heartbeat well within this
};

struct PullStats {
  std::vector<int64_t> versions;  // per shard; pass to Push as the base versions
  absl::Duration server_wait;     // longest time a shard held the pull for consistency
  int64_t payload_bytes = 0;      // tensor bytes received (after compression)
};

struct PushStats {
  int64_t max_staleness = 0;  // over the shards that applied the gradient now
  int applied = 0;            // shards that applied it now
  int buffered = 0;           // shards that buffered it (BSP)
  int duplicates = 0;         // shards that had it already
  int dropped = 0;            // shards whose drop rule refused it as too stale
  int late = 0;               // shards that had applied its BSP round without it
  int64_t payload_bytes = 0;  // tensor bytes sent (after compression)
};

struct PushPullStats {
  PushStats pushed;
  PullStats pulled;  // of the next step
};

struct ShardReport {
  int shard_id = 0;
  ConsistencyMode mode = ConsistencyMode::kBsp;
  int staleness_bound = 0;
  bool initialized = false;
  KeyRange range;
  int64_t version = 0;
  int64_t min_clock = 0;
  int64_t rejected_nonfinite = 0;
  std::string update_rule;
  int backup_workers = 0;
  uint64_t incarnation = 0;         // the shard process
  int64_t restored_version = -1;    // of the checkpoint restored at start; -1: none
  int64_t checkpoint_version = -1;  // of the newest checkpoint written; -1: none
  int64_t pushes_accepted = 0;
  int64_t pushes_duplicate = 0;
  int64_t pieces_received = 0;         // pushes of part of a range (priority scheduling)
  int shared_memory_workers = 0;       // worker processes with a shared region attached
  int64_t shared_memory_payloads = 0;  // pushes and pulls whose payload used shared memory
  int64_t local_calls = 0;  // Push, Pull and PushPull calls over the local socket, not gRPC
  int64_t rejected_unauthenticated = 0;
  bool finished_at_restore = false;  // the restored checkpoint held a finished job
  int64_t decay_updates = 0;         // the cosine schedule's end in force; 0: none or unknown
  bool finished_job_rerun = false;   // a new worker found the job finished; nothing trained since
  std::vector<SparseTableStatus> tables;  // the model's sparse tables' parts on this shard
  SparseCallTiming sparse_timing;
  struct Worker {
    int rank = 0;
    int64_t clock = 0;
    std::string state;
    int64_t applied = 0;
    int64_t max_staleness = 0;
    double mean_staleness = 0.0;
    std::vector<int64_t> staleness_counts;
    int64_t dropped = 0;
    int64_t late = 0;
    int64_t planned_steps = 0;  // declared by the worker (SetWorkPlan); 0: not yet
    int64_t samples_per_step = 0;
    int64_t skipped_steps = 0;  // BSP rounds applied without it
  };
  std::vector<Worker> workers;
};

// Buffers the transport itself reads and writes (a shared-memory region): a caller that keeps
// its weights in `weights` and its gradient in `gradient` lets the shards write and read them in
// place, with no copy on the worker. Empty spans: no such buffers.
struct TransportBuffers {
  absl::Span<float> weights;
  absl::Span<float> gradient;
};

// Rows of one of the model's sparse tables (its place in the model's ParamDescription) that
// travel with a data call: distinct keys, and keys.size() x dim values in key order, which a pull
// writes and a push reads (the gradients). The client sends each key to the shard that owns it.
struct RowsToPull {
  int table = 0;
  absl::Span<const uint64_t> keys;
  absl::Span<float> values;
};
struct RowsToPush {
  int table = 0;
  absl::Span<const uint64_t> keys;
  absl::Span<const float> gradients;
};

class ParameterClient {
 public:
  virtual ~ParameterClient() = default;
  // Hands the caller the transport's own buffers of set `set` (0, 1, ...), if it has them (after
  // Register). A pull into exactly `weights` and a push from exactly `gradient` then move no bytes
  // on the worker's side; once every set is taken, pulls and pushes of other buffers carry their
  // payloads in the messages, since the caller owns those buffers. The spans stay valid as long
  // as the client. A caller that computes one step while another travels takes two sets.
  virtual TransportBuffers TakeTransportBuffers(int /*set*/) { return {}; }
  // Registers `rank` with every shard (waiting up to `timeout` for them to come up) and checks
  // that they agree on the cluster: FAILED_PRECONDITION when a shard has another id, shard
  // count, worker count or mode than its position in the list implies.
  virtual absl::StatusOr<ClusterInfo> Register(int rank, absl::Duration timeout) = 0;
  // Renews this worker's lease on every shard. One attempt per shard, all at once and each
  // with a short deadline: a shard that is down never delays the others' leases.
  virtual absl::Status Heartbeat() = 0;
  // Ends this worker's lease on every shard now, as if it had expired: for a worker that stops
  // for good before the steps it declared (its time budget), so that no BSP round and no SSP
  // pull waits for it until its lease runs out. What it pushed stays applied; a later Register
  // brings the rank back. One attempt per shard, as Heartbeat; a shard that misses it expires
  // the lease on its own. The heartbeats must have stopped first (the next would be refused).
  virtual absl::Status Leave() = 0;
  // Declares the work this worker will do (steps > 0 pushes, samples each); every later
  // Register and Heartbeat carries it, so the shards can account for it (ShardReport::Worker).
  virtual void SetWorkPlan(int64_t steps, int64_t samples_per_step) = 0;
  // Offers initial values of the whole buffer; shards that already have values keep them.
  virtual absl::Status Init(absl::Span<const float> params) = 0;
  // Fills the whole buffer for step `clock` (no_wait: an observer's read of the current values).
  virtual absl::StatusOr<PullStats> Pull(int64_t clock, bool no_wait, absl::Span<float> params) = 0;
  // Sends each shard its range of the mean gradient of step `clock`.
  virtual absl::StatusOr<PushStats> Push(int64_t clock, const std::vector<int64_t>& base_versions,
                                         int num_samples, absl::Span<const float> gradient) = 0;
  // Push of step `clock`, then Pull of step `pull_clock` (clock + 1, or later for a worker that
  // runs ahead) into `params`: what the two calls would do, in one round trip per shard where
  // the transport can. An error may come after the push landed (the pull failed); the shards'
  // clocks say whether it did, as after a failed Push.
  virtual absl::StatusOr<PushPullStats> PushPull(int64_t clock,
                                                 const std::vector<int64_t>& base_versions,
                                                 int num_samples, absl::Span<const float> gradient,
                                                 int64_t pull_clock, absl::Span<float> params) {
    PushPullStats stats;
    ASSIGN_OR_RETURN(stats.pushed, Push(clock, base_versions, num_samples, gradient));
    ASSIGN_OR_RETURN(stats.pulled, Pull(pull_clock, /*no_wait=*/false, params));
    return stats;
  }

  // Priority scheduling (P3, BytePS): the step's weights and gradients travel in parts, key
  // ranges of the flat buffer (one per layer, say), so that the first layers' weights can be used
  // before the rest has arrived and the last layers' gradients can leave while backward still
  // runs. Each part is cut at the shards' boundaries into one call per piece.
  //
  // Pulls `parts` of step `clock` into `params`, all calls in flight at once and issued in the
  // order given (the forward pass's); `on_part(i)` runs on the caller's thread as soon as part
  // i has arrived whole. The versions are per shard, the oldest of its pieces.
  virtual absl::StatusOr<PullStats> PullParts(int64_t clock, absl::Span<const KeyRange> parts,
                                              absl::Span<float> params,
                                              const std::function<void(size_t)>& on_part) = 0;
  // Pushes `parts` (disjoint) of the gradient of step `clock`. A shard acts on the clock once
  // the pieces it received cover its range, so a step is pushed whole over one or more calls;
  // the stats count the shards whose range this call completed.
  virtual absl::StatusOr<PushStats> PushParts(int64_t clock,
                                              const std::vector<int64_t>& base_versions,
                                              int num_samples, absl::Span<const float> gradient,
                                              absl::Span<const KeyRange> parts) = 0;
  // Sparse rows with the whole buffer's calls (models with sparse tables): Pull, Push and
  // PushPull that also read `pull_rows` and send the gradients of `push_rows`, in the same round
  // trips. A client without sparse support answers UNIMPLEMENTED when rows are given.
  virtual absl::StatusOr<PullStats> PullWithRows(int64_t clock, bool no_wait,
                                                 absl::Span<float> params,
                                                 absl::Span<const RowsToPull> rows) {
    if (!rows.empty()) return absl::UnimplementedError("this client carries no sparse rows");
    return Pull(clock, no_wait, params);
  }
  // An observer's read of rows alone (no dense weights, no waiting, no worker identity): the
  // values of `rows`' keys as the shards hold them now. UNIMPLEMENTED for a client without rows.
  virtual absl::Status PullRows(int64_t /*clock*/, absl::Span<const RowsToPull> rows) {
    if (!rows.empty()) return absl::UnimplementedError("this client carries no sparse rows");
    return absl::OkStatus();
  }
  virtual absl::StatusOr<PushStats> PushWithRows(int64_t clock,
                                                 const std::vector<int64_t>& base_versions,
                                                 int num_samples, absl::Span<const float> gradient,
                                                 absl::Span<const RowsToPush> rows) {
    if (!rows.empty()) return absl::UnimplementedError("this client carries no sparse rows");
    return Push(clock, base_versions, num_samples, gradient);
  }
  virtual absl::StatusOr<PushPullStats> PushPullWithRows(
      int64_t clock, const std::vector<int64_t>& base_versions, int num_samples,
      absl::Span<const float> gradient, absl::Span<const RowsToPush> push_rows, int64_t pull_clock,
      absl::Span<float> params, absl::Span<const RowsToPull> pull_rows) {
    if (push_rows.empty() && pull_rows.empty()) {
      return PushPull(clock, base_versions, num_samples, gradient, pull_clock, params);
    }
    return PushThenPull(clock, base_versions, num_samples, gradient, push_rows, pull_clock, params,
                        pull_rows);
  }

  virtual absl::StatusOr<std::vector<ShardReport>> Status() = 0;

 protected:
  // PushPullWithRows as two calls: PushWithRows, then PullWithRows.
  absl::StatusOr<PushPullStats> PushThenPull(int64_t clock,
                                             const std::vector<int64_t>& base_versions,
                                             int num_samples, absl::Span<const float> gradient,
                                             absl::Span<const RowsToPush> push_rows,
                                             int64_t pull_clock, absl::Span<float> params,
                                             absl::Span<const RowsToPull> pull_rows) {
    PushPullStats stats;
    ASSIGN_OR_RETURN(stats.pushed,
                     PushWithRows(clock, base_versions, num_samples, gradient, push_rows));
    ASSIGN_OR_RETURN(stats.pulled, PullWithRows(pull_clock, /*no_wait=*/false, params, pull_rows));
    return stats;
  }

 public:
  // Cancels calls in flight and fails later ones with CANCELLED; thread-safe.
  virtual void Cancel() = 0;
};

}  // namespace ps

#endif  // PS_WORKER_PARAMETER_CLIENT_H_
