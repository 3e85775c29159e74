#ifndef PS_SERVER_CONSISTENCY_H_
#define PS_SERVER_CONSISTENCY_H_

// The consistency controller of one shard: per-worker clocks and membership, and the rules of
// DESIGN.md section 3 that decide when a pull may proceed and what a push does.
//
// Membership: every rank 0..num_workers-1 starts "pending" (expected, never seen) and counts in
// the barrier set and the min clock, so training waits for all workers to join. A registered
// worker is "live"; one whose lease expired is "expired" and leaves the barrier set and the min
// clock until it registers again.
//
// Not thread-safe: the owning Shard serialises every call under its mutex.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/consistency_mode.h"

namespace ps {

struct ConsistencyOptions {
  ConsistencyMode mode = ConsistencyMode::kBsp;
  int staleness = 0;    // SSP's bound s >= 0; ignored by BSP and ASP
  int num_workers = 1;  // the workers of the job, ranks 0..num_workers-1
  // BSP backup workers (Chen et al., 2016): a round is applied once all but this many of its
  // members have pushed; the pushes that come after are late: counted, not applied.
  int backup_workers = 0;
};

absl::Status ValidateConsistencyOptions(const ConsistencyOptions& options);

enum class WorkerState { kPending, kLive, kExpired };
const char* WorkerStateName(WorkerState state);

// What a push of a valid clock does.
enum class PushAction {
  kApply,      // SSP/ASP: one optimizer step now
  kBuffer,     // BSP: hold for the round; the round may then be complete (RoundReady())
  kDuplicate,  // this (worker, clock) was applied or buffered before: acknowledge only
  kLate,       // BSP with backup workers: the round was applied without it; count, don't apply
};

class ConsistencyController {
 public:
  // Options must be valid.
  explicit ConsistencyController(const ConsistencyOptions& options);

  const ConsistencyOptions& options() const { return options_; }

  // Marks `rank` live and returns the clock it resumes at. Under BSP a worker that rejoins after
  // missing rounds is moved up to the current round: those rounds were applied without it, and
  // the steps it was moved past are counted in skipped(rank).
  int64_t Register(int rank);
  // Marks a live worker expired (its lease ran out).
  void Expire(int rank);

  WorkerState state(int rank) const { return workers_[rank].state; }
  int64_t clock(int rank) const { return workers_[rank].clock; }
  // Steps of `rank` that no update will ever contain: BSP rounds applied without it.
  int64_t skipped(int rank) const { return workers_[rank].skipped; }

  // The smallest clock among pending and live workers; when every worker has expired, the
  // largest clock of all (nobody holds the others back).
  int64_t MinClock() const;

  // Whether a pull for step `clock` may return now: BSP once the update of clock-1 is applied
  // (rounds() >= clock); SSP(s) once MinClock() >= clock - s; ASP always.
  bool PullReady(int64_t clock) const;

  // Classifies a push of step `clock` by `rank` without changing anything. A clock beyond the
  // worker's next step is FAILED_PRECONDITION; a clock it already pushed is kDuplicate.
  absl::StatusOr<PushAction> ClassifyPush(int rank, int64_t clock) const;
  // Records an accepted (non-duplicate) push: the worker's clock advances by one.
  void RecordPush(int rank);

  // BSP rounds: the number of updates applied so far, and whether the current round is complete
  // (all but backup_workers of the pending and live workers have pushed it, and at least one
  // worker has). Never true in the other modes, which have no rounds.
  int64_t rounds() const { return rounds_; }
  // Checkpoint restore: sets a worker's state and clock, and the rounds applied. Valid values
  // only (rank in range, clock >= 0, rounds >= 0).
  void RestoreWorker(int rank, WorkerState state, int64_t clock, int64_t skipped) {
    workers_[rank].state = state;
    workers_[rank].clock = clock;
    workers_[rank].skipped = skipped;
  }
  void RestoreRounds(int64_t rounds) { rounds_ = rounds; }
  bool RoundReady() const;
  void CompleteRound() { ++rounds_; }

 private:
  struct Worker {
    WorkerState state = WorkerState::kPending;
    int64_t clock = 0;
    int64_t skipped = 0;
  };
  ConsistencyOptions options_;
  std::vector<Worker> workers_;
  int64_t rounds_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_CONSISTENCY_H_
