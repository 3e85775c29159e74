#ifndef PS_SERVER_SHARD_H_
#define PS_SERVER_SHARD_H_

// One parameter-server shard: its slice of the flat parameter array, the optimizer state of that
// slice, the consistency controller and the workers' leases. This is the domain object behind
// the gRPC service (service.h), which only converts messages; it never sees proto types.
//
// Thread-safe: every method may be called concurrently. A pull waits until the consistency rule
// allows it or its deadline passes; pushes, lease expiry and Shutdown settle it. PullAsync waits
// without holding any thread (the gRPC service's callback handlers use it); Pull blocks its
// caller.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/base/param_layout.h"
#include "common/codec/tensor_codec.h"
#include "common/optim/optimizer.h"
#include "common/optim/sparse_table.h"
#include "server/consistency.h"
#include "server/lendable_values.h"
#include "server/staleness_histogram.h"
#include "server/update_rule.h"

namespace ps {

// One gradient applied on its own (SSP and ASP), in the order the shard applied it. Enough to
// replay a run: ps_replay recomputes the gradient of (rank, clock) at the base versions.
struct AppliedUpdate {
  int64_t version_before = 0;  // the shard's version when it applied the gradient
  int rank = 0;
  int64_t clock = 0;
  int64_t base_version = 0;
  int64_t staleness = 0;
};

// How long a shard restored from a checkpoint waits at least for the workers that were live to
// register again (ShardOptions::lease when longer): their retries' backoff (up to 5 s), a new
// connection and the registration itself, with room to spare on a loaded machine.
inline constexpr absl::Duration kRestoreGrace = absl::Seconds(30);

// A shard's state as a checkpoint payload (Shard::EncodeSnapshot) at `version`; an incremental
// one (base_version >= 0) is restored over the full one of base_version.
struct ShardSnapshot {
  int64_t version = 0;
  int64_t base_version = -1;
  std::string payload;
};

// Drops from `queue` (oldest first, as the chain made them) the snapshots that a newer one in it
// makes needless, so that a writer slower than the updates writes the newest state next and the
// queue never holds more than two. A full snapshot is the whole state: everything before the
// newest full one goes. An incremental one holds every change since its base: after the newest
// full one (or from the front, when there is none) only the newest incremental one stays; its base
// is that full one, or one the writer has already taken. Returns how many were dropped.
int DropSupersededSnapshots(std::deque<ShardSnapshot>* queue);

struct ShardOptions {
  int shard_id = 0;  // 0 <= shard_id < num_shards
  int num_shards = 1;
  ConsistencyOptions consistency;            // mode, SSP bound, number of workers
  OptimizerOptions optimizer;                // the optimizer applied to the slice
  SparseOptimizerOptions sparse_optimizer;   // the row-wise one of the sparse tables' rows
  SparseMemoryOptions sparse_memory;         // each table's capacity, eviction and admission
  UpdateRuleOptions update_rule;             // how stale gradients are applied (SSP, ASP)
  absl::Duration lease = absl::Seconds(10);  // a worker silent this long leaves the barrier set
  // This shard process's incarnation (non-zero; random per process start, see the proto).
  uint64_t incarnation = 1;
  // Every this many updates (0: never) the shard encodes a snapshot under its lock, at the exact
  // version, and hands it to on_snapshot. Under BSP every shard applies one update per round, so
  // all shards snapshot at the same clock: their checkpoints form one consistent cut.
  int64_t snapshot_every_updates = 0;
  // Snapshots of the checkpoint chain (those of snapshot_every_updates, and EncodeSnapshot's with
  // kChain) are full every this many (1: always); those between are incremental: the sparse
  // tables' rows changed since the last full one, with everything else whole. A model without
  // sparse tables always gets full ones.
  int full_snapshot_every = 10;
  // Called under the shard's lock with an encoded snapshot (see EncodeSnapshot); must be quick
  // (queue it) and must not call back into the shard.
  std::function<void(ShardSnapshot snapshot)> on_snapshot;
  // Called under the shard's lock for every gradient applied on its own (not for BSP rounds), in
  // apply order; must not call back into the shard. Empty: nothing is recorded.
  std::function<void(const AppliedUpdate&)> on_apply;
};

// INVALID_ARGUMENT naming the first option out of range: the shard id, the consistency, optimizer,
// update-rule and sparse tables' options, the lease, the incarnation and the snapshot cadence.
absl::Status ValidateShardOptions(const ShardOptions& options);

// The work a worker declares it will do (with Register and Heartbeat): the shard accounts what
// it applied against it, and ends an automatic cosine schedule at the run's last update.
struct WorkPlan {
  int64_t steps = 0;             // > 0: the worker pushes clocks 0..steps-1; 0: not declared
  int64_t samples_per_step = 0;  // batch x accumulation
};

struct WorkerStatusInfo {
  int rank = 0;
  int64_t clock = 0;
  WorkerState state = WorkerState::kPending;
  StalenessHistogram staleness;
  int64_t dropped = 0;        // gradients refused by the drop rule (too stale)
  int64_t late = 0;           // BSP pushes that came after their round was applied (backup workers)
  WorkPlan plan;              // as declared; steps 0: not declared yet
  int64_t skipped_steps = 0;  // BSP rounds applied without it (ConsistencyController::skipped)
};

struct ShardStatus {
  int shard_id = 0;
  int num_shards = 1;
  ConsistencyMode mode = ConsistencyMode::kBsp;
  int staleness_bound = 0;
  bool initialized = false;
  uint64_t fingerprint = 0;
  KeyRange range;
  int64_t version = 0;
  int64_t min_clock = 0;
  int64_t rejected_nonfinite = 0;
  int64_t pushes_accepted = 0;   // acknowledged as applied, buffered, dropped or late
  int64_t pushes_duplicate = 0;  // acknowledged as duplicates
  int64_t pieces_received = 0;   // pushes of part of the range, staged (priority scheduling)
  // Bytes held for pieces outside the BSP round buffers (SSP and ASP: a slice per worker that
  // pushes in pieces; BSP: none).
  int64_t staging_bytes = 0;
  int64_t restored_version = -1;  // the checkpoint's version this shard restored, -1: none
  // The restored checkpoint held a finished job: every rank had declared its work and pushed
  // all of it. What these shards hold is that job's result, not a new one.
  bool finished_at_restore = false;
  int64_t decay_updates = 0;  // the cosine schedule's end in force; 0: none or not known yet
  // A new worker process registered after the job had finished, and no update was applied
  // since: these shards hold that job's result, not a new one.
  bool finished_job_rerun = false;
  std::vector<WorkerStatusInfo> workers;
};

// Rows of one of the model's sparse tables (its index in the order Init declared them): the keys,
// and with a push their gradients (keys.size() x dim, the mean over the step's samples).
struct SparseRows {
  int table = 0;
  std::vector<uint64_t> keys;
  std::vector<float> values;
};
// Whether every value of every entry is finite.
bool RowsFinite(const std::vector<SparseRows>& rows);

// The identity a worker's call carries: its rank and the incarnations it registered with. A zero
// incarnation is not checked (observers and simple clients).
struct Caller {
  int rank = 0;
  uint64_t incarnation = 0;        // the worker process
  uint64_t shard_incarnation = 0;  // the shard process the worker registered with
};

class Shard {
 public:
  // INVALID_ARGUMENT when an option is out of range.
  static absl::StatusOr<std::unique_ptr<Shard>> Create(const ShardOptions& options);
  ~Shard();  // Shutdown()s

  struct RegisterResult {
    int64_t clock = 0;  // where the worker resumes
    bool initialized = false;
    // Every rank had pushed all the steps it declared when this worker registered (a new process
    // then sets ShardStatus::finished_job_rerun until an update is applied).
    bool job_finished = false;
  };
  // Starts or renews `rank`'s lease; a new `incarnation` (non-zero) replaces the process that
  // held the rank, whose later calls get ABORTED. A declared `plan` (steps > 0) is recorded.
  // INVALID_ARGUMENT for a bad rank or a negative plan; FAILED_PRECONDITION when the shard holds
  // another layout.
  absl::StatusOr<RegisterResult> Register(int rank, uint64_t fingerprint, uint64_t incarnation = 0,
                                          const WorkPlan& plan = {});
  // Renews a lease and records a declared `plan`, as Register. NOT_FOUND if the rank never
  // registered; ABORTED if its lease expired or the incarnations differ (the worker must
  // Register again).
  absl::Status Heartbeat(const Caller& caller, const WorkPlan& plan = {});
  // Ends `caller`'s lease now, as if it had expired (the lease thread expires it, closes a BSP
  // round that waited only for it and answers the pulls it held): the worker stops for good.
  // What it pushed stays applied; under BSP the rounds closed without it count as its skipped
  // steps, as after an expiry. OK when the lease had ended already (safe to retry); ABORTED when
  // another process holds the rank or the shard restarted (that lease is not the caller's).
  absl::Status Leave(const Caller& caller);

  struct InitResult {
    bool already_initialized = false;
    int64_t version = 0;
  };
  // Sets the slice once, and declares the model's sparse tables (their rows start from their
  // initial values, see SparseTable); see the Init rpc in parameter_server.proto for the rules.
  absl::StatusOr<InitResult> Init(uint64_t fingerprint, int64_t total_params, KeyRange range,
                                  absl::Span<const float> values,
                                  const std::vector<SparseTableSpec>& tables = {});

  struct PullArgs {
    Caller caller;  // the worker, its process and the shard process it registered with
    uint64_t fingerprint = 0;
    // The shard's whole range, or any non-empty part of it (a worker pulling layer by layer).
    KeyRange range;
    int64_t clock = 0;
    bool no_wait = false;  // observer read: at once, whatever the mode; the caller is ignored
    // Rows to read with the slice (keys only), each owned by this shard (ShardOfKey).
    std::vector<SparseRows> rows;
    // The result holds a loan of the buffer `read` saw (PullResult::loan): those values stay
    // alive and unchanged while the loan is held, so they may be sent after the lock without a
    // copy. A push meanwhile writes a copy (LendableValues).
    bool lend = false;
  };
  struct PullResult {
    int64_t version = 0;
    int64_t min_clock = 0;
    absl::Duration waited;                 // zero when the pull did not have to wait
    std::vector<std::vector<float>> rows;  // the values of args.rows, entry by entry
    LendableValues::Loan loan;             // with args.lend: the buffer `read` saw
  };
  // Waits until the mode allows step args.clock (or `deadline`: DEADLINE_EXCEEDED), then copies
  // args.range of the slice into `out` (range.size() floats). UNAVAILABLE after Shutdown().
  absl::StatusOr<PullResult> Pull(const PullArgs& args, absl::Time deadline, absl::Span<float> out);
  // The same, handing the slice to `read` under the shard's lock instead (the transport encodes it
  // straight into its send buffers); `read` must not call back into the shard.
  using SliceReader = std::function<void(absl::Span<const float> values)>;
  absl::StatusOr<PullResult> Pull(const PullArgs& args, absl::Time deadline,
                                  const SliceReader& read);
  // The same without holding the caller's thread while the pull waits. `done` runs exactly once:
  // on this thread when the pull can be answered at once (or fails), otherwise on the thread
  // whose push, lease expiry, deadline or Shutdown settles it, never under the shard's lock.
  // `read` runs under the lock just before a successful `done`. Returns a non-zero id while the
  // pull waits (for CancelPull), 0 when `done` has already run.
  using PullDone = std::function<void(absl::StatusOr<PullResult>)>;
  int64_t PullAsync(const PullArgs& args, absl::Time deadline, SliceReader read, PullDone done);
  // Settles a waiting pull with CANCELLED (its caller went away); no-op when it has settled.
  void CancelPull(int64_t id);

  struct PushArgs {
    Caller caller;  // the worker, its process and the shard process it registered with
    uint64_t fingerprint = 0;
    // The shard's whole range, or a piece of it: a worker that pushes layer by layer as backward
    // produces them (priority scheduling) sends several disjoint pieces of one clock. The shard
    // stages pieces and acts on the clock only once they cover its range, so exactly-once, BSP
    // rounds and snapshots see whole pushes only.
    KeyRange range;
    int64_t clock = 0;
    int64_t base_version = 0;  // pieces of one clock may differ; the smallest counts
    // range.size() elements in any encoding, as received (see common/codec/tensor_codec.h).
    EncodedTensor gradient;
    // Gradients of rows this shard owns (distinct keys per entry); a whole push only (no piece).
    // They follow the dense gradient's fate: applied, buffered for the BSP round (whose rows get
    // the mean over the round's workers, summed in rank order), dropped or late with it.
    std::vector<SparseRows> rows;
  };
  struct PushResult {
    bool applied = false;
    bool buffered = false;
    bool duplicate = false;
    bool dropped = false;  // too stale for the drop rule: acknowledged, counted, not applied
    bool late = false;     // its BSP round was applied without it: counted, not applied
    bool staged = false;   // a piece held until the clock's other pieces arrive
    int64_t version = 0;
    int64_t staleness = 0;  // of this gradient, when applied
  };
  // Validates everything before touching state: a rejected push changes nothing but the
  // rejection counter. Codes as documented on the Push rpc. A piece that overlaps another piece
  // of the same clock without being equal to it is INVALID_ARGUMENT; an equal one is a
  // duplicate. Staged pieces are not in snapshots: a restarted shard has a new incarnation, so
  // the worker registers again and pushes the clock whole once more.
  absl::StatusOr<PushResult> Push(const PushArgs& args);

  ShardStatus GetStatus() const;
  // The key range the shard holds (empty before Init or restore).
  KeyRange range() const;
  const ShardOptions& options() const { return options_; }
  // A copy of the slice (empty before Init). For tests and checkpoints.
  std::vector<float> Values() const;
  // Rows, memory and counters of each sparse table, in declaration order.
  using TableStatus = SparseTableStatus;
  std::vector<TableStatus> TableStatuses() const;
  SparseCallTiming sparse_timing() const;

  // The shard's whole state (slice, optimizer slots, version, BSP round and buffered gradients,
  // workers' clocks, incarnations and statistics) as a checkpoint payload, with its version.
  // kStandalone: always full, and the checkpoint chain is untouched. kChain: full or incremental
  // as full_snapshot_every says (an incremental one needs the full one of base_version).
  using Snapshot = ShardSnapshot;
  enum class SnapshotUse { kStandalone, kChain };
  Snapshot EncodeSnapshot(SnapshotUse use = SnapshotUse::kStandalone);
  // The next chain snapshot is a full one (say, because writing the last full one failed).
  void RestartSnapshotChain();
  // Loads a payload of EncodeSnapshot into a fresh shard (before any Register or Init); an
  // incremental one over the full one `load_base` returns for its base version.
  // FAILED_PRECONDITION when the snapshot is of another shard or configuration (id, shard
  // count, workers, mode) or the shard is already in use; DATA_LOSS when it is malformed or its
  // base is not its base; NOT_FOUND when its base cannot be loaded. On error the shard is
  // unchanged. Workers that were live get a fresh lease.
  using BaseLoader = std::function<absl::StatusOr<std::string>(int64_t version)>;
  absl::Status RestoreSnapshot(absl::string_view payload, const BaseLoader& load_base = nullptr);

  // Fails every waiting and later Pull/Push with UNAVAILABLE and stops the lease thread.
  // Idempotent.
  void Shutdown();

 private:
  explicit Shard(const ShardOptions& options);
  // Who calls ValidateAccess: a worker's push, a worker's pull, or an observer's (no-wait) read,
  // which skips the worker-membership checks. Pulls may name rows alone (an empty range at the
  // slice's start); a push always carries its range's values.
  enum class Access { kPush, kPull, kObserve };
  // Checks a Pull or Push against the shard's state.
  absl::Status ValidateAccess(int rank, uint64_t fingerprint, KeyRange range, size_t length,
                              Access access) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckRank(int rank) const;
  // ABORTED when the call comes from a replaced worker process or was meant for an earlier
  // process of this shard.
  absl::Status CheckIncarnation(const Caller& caller) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Encodes the state; an incremental snapshot (base_version >= 0) holds the tables' rows
  // changed since the full one of that version.
  void EncodeSnapshotLocked(int64_t base_version, std::string* out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The chain's next snapshot: full (and the tables start recording changes) or incremental.
  Snapshot ChainSnapshotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Snapshots when the version reached a multiple of snapshot_every_updates.
  void MaybeSnapshot() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK for a live worker; `if_pending` for one that never registered, ABORTED for an expired one.
  absl::Status CheckLive(int rank, absl::StatusCode if_pending) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RenewLease(int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every rank has declared its work and pushed all of it.
  bool JobFinished() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a declared plan (steps > 0); the first one fixes an automatic cosine schedule's end.
  void RecordPlan(int rank, const WorkPlan& plan) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies the BSP round when it is complete (after a push or an expiry). `completing`, when
  // set, is the gradient of rank `completing_rank`, read in place instead of from its round
  // buffer (the push that completes the round, not copied first): applied as it is when it is
  // the round's only gradient (any dense encoding, any pieces), summed from when it is one
  // float32 piece; otherwise the caller has put it in the round buffer.
  void MaybeApplyRound(int completing_rank = -1, const EncodedTensor* completing = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a push of `rank` that completes the BSP round is the round's only gradient.
  bool AloneInRoundLocked(int rank) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyGradient(const EncodedTensor& gradient, float lr_scale = 1.0f)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sparse rows (shard_sparse.cc). The checks of a request's rows: known tables, keys this
  // shard owns, and with gradients (with_values) distinct keys, dim values each, all finite.
  absl::Status ValidateRowsLocked(const std::vector<SparseRows>& rows, bool with_values) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyRowsLocked(const std::vector<SparseRows>& rows, float lr_scale = 1.0f)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // BSP: records the keys of a worker's pull of rows; FAILED_PRECONDITION for a push of rows
  // whose keys (or clock) are not those of the worker's latest pull.
  void RecordPulledKeysLocked(int rank, int64_t clock, const std::vector<SparseRows>& rows)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckPushedKeysLocked(int rank, int64_t clock,
                                     const std::vector<SparseRows>& rows) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The BSP round's rows: each key's gradients summed in rank order, times 1 / contributors.
  void ApplyRoundRowsLocked(int contributors) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::vector<float>> ReadRowsLocked(const std::vector<SparseRows>& rows) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies an SSP/ASP push by the configured update rule; false if the rule dropped it.
  bool ApplyStale(int rank, int64_t clock, int64_t base_version, const EncodedTensor& gradient,
                  const std::vector<SparseRows>& rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LeaseLoop();
  // The checks every push passes (access, incarnation, finite values, base version, clock), and
  // what the consistency controller makes of its clock; renews the lease.
  absl::StatusOr<PushAction> AdmitPushLocked(const PushArgs& args, bool finite)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<PushResult> PushLocked(const PushArgs& args, bool finite)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What an admitted whole push does: duplicate, apply, buffer for the BSP round, or count late.
  PushResult ActOnPushLocked(const PushArgs& args, PushAction action)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A push of part of the range: staged, then handed to PushLocked whole once complete.
  absl::StatusOr<PushResult> PushPieceLocked(const PushArgs& args, bool finite)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<PullResult> ReadSliceLocked(const PullArgs& args, absl::Time start, absl::Time now,
                                             const SliceReader& read)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PullTimedOut(const PullArgs& args) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Settles the waiting pulls that can be settled now (ready, past their deadline, or the shard
  // shut down), queueing their `done` calls in `completions` to run after the lock is released.
  void FinishWaitingPulls(std::vector<std::function<void()>>* completions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct WaitingPull {
    int64_t id = 0;
    PullArgs args;
    absl::Time deadline;
    absl::Time start;
    SliceReader read;
    PullDone done;
  };

  const ShardOptions options_;
  mutable absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool initialized_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t fingerprint_ ABSL_GUARDED_BY(mu_) = 0;
  KeyRange range_ ABSL_GUARDED_BY(mu_);
  LendableValues values_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Optimizer> optimizer_ ABSL_GUARDED_BY(mu_);
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t rejected_nonfinite_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pushes_accepted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pushes_duplicate_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pieces_received_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t restored_version_ ABSL_GUARDED_BY(mu_) = -1;
  bool finished_at_restore_ ABSL_GUARDED_BY(mu_) = false;
  // The version at which a new worker process registered over a finished job; -1: never.
  int64_t rerun_at_version_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<WorkPlan> plans_ ABSL_GUARDED_BY(mu_);  // per rank, as last declared
  // The cosine schedule's end: --decay_updates, or (0 there) the run's end once declared.
  int64_t decay_updates_ ABSL_GUARDED_BY(mu_) = 0;
  bool used_ ABSL_GUARDED_BY(mu_) = false;  // a Register or Init happened: no restore any more
  // The incarnation each rank registered with (0: none yet). Exactly-once bookkeeping is this
  // and the clock per rank: O(num_workers), however long the job runs or how often workers come
  // and go.
  std::vector<uint64_t> incarnations_ ABSL_GUARDED_BY(mu_);
  ConsistencyController controller_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> lease_deadline_ ABSL_GUARDED_BY(mu_);
  std::vector<StalenessHistogram> staleness_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> dropped_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> late_ ABSL_GUARDED_BY(mu_);
  // DC-ASGD: the slice as each worker last pulled it, and scratch for the compensated gradient.
  std::vector<std::vector<float>> pulled_values_ ABSL_GUARDED_BY(mu_);
  std::vector<float> compensated_ ABSL_GUARDED_BY(mu_);
  // A sparse (top-k) gradient decoded to its dense form before the optimizer runs.
  std::vector<float> dense_scratch_ ABSL_GUARDED_BY(mu_);
  // BSP: the gradient each worker pushed for the open round, and the version it was based on.
  std::vector<std::vector<float>> round_gradients_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> round_base_versions_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> round_has_gradient_ ABSL_GUARDED_BY(mu_);
  std::vector<float> round_sum_ ABSL_GUARDED_BY(mu_);
  // The sparse tables, in declaration order, and each worker's rows for the open BSP round.
  std::vector<std::unique_ptr<SparseTable>> tables_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<SparseRows>> round_rows_ ABSL_GUARDED_BY(mu_);
  SparseCallTiming sparse_timing_ ABSL_GUARDED_BY(mu_);
  // The checkpoint chain: the version of its last full snapshot (-1: none yet, the next one is
  // full) and the incremental ones encoded since.
  int64_t chain_base_version_ ABSL_GUARDED_BY(mu_) = -1;
  int chain_increments_ ABSL_GUARDED_BY(mu_) = 0;
  // Pieces of each worker's current clock received so far (priority scheduling, chunked
  // pushes). Under SSP and ASP the buffer is kept between clocks, so only workers that push in
  // pieces cost a slice each; under BSP the pieces fill the worker's round buffer.
  struct StagedPush {
    int64_t clock = -1;  // -1: nothing staged
    int64_t base_version = 0;
    int64_t covered = 0;               // elements received
    std::map<int64_t, int64_t> parts;  // begin -> end of the pieces received, absolute keys
    bool in_round_buffer = false;      // the pieces fill round_gradients_[rank], not `gradient`
    std::vector<float> gradient;       // the slice's gradient, filled piece by piece
  };
  std::vector<StagedPush> staged_ ABSL_GUARDED_BY(mu_);
  // Where rank's pieces of its staged clock are gathered.
  std::vector<float>& StagedGradient(int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return staged_[rank].in_round_buffer ? round_gradients_[rank] : staged_[rank].gradient;
  }
  // BSP: the keys each worker's latest pull of rows asked for, per table, and its clock. A push
  // may carry rows of those keys only (its step computed from them), for that clock.
  struct PulledKeys {
    int64_t clock = -1;  // -1: no pull of rows yet
    std::vector<absl::flat_hash_set<uint64_t>> keys;
  };
  std::vector<PulledKeys> pulled_keys_ ABSL_GUARDED_BY(mu_);
  bool lease_changed_ ABSL_GUARDED_BY(mu_) = false;  // wakes the lease thread early
  // Pulls waiting for their consistency condition: no thread is held for them. Woken by the
  // push or expiry that satisfies them, by their deadline (the lease thread) or by Shutdown.
  std::vector<WaitingPull> waiting_pulls_ ABSL_GUARDED_BY(mu_);
  int64_t next_pull_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::thread lease_thread_;
};

}  // namespace ps

#endif  // PS_SERVER_SHARD_H_
