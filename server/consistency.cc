#include "server/consistency.h"

#include <algorithm>
#include <cassert>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/base/enum_names.h"

namespace ps {

absl::Status ValidateConsistencyOptions(const ConsistencyOptions& o) {
  if (o.num_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_workers must be >= 1, got ", o.num_workers));
  }
  if (o.staleness < 0) {
    return absl::InvalidArgumentError(absl::StrCat("staleness must be >= 0, got ", o.staleness));
  }
  if (o.backup_workers < 0 || o.backup_workers >= o.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("backup_workers must be in [0, num_workers), got ", o.backup_workers));
  }
  if (o.backup_workers > 0 && o.mode != ConsistencyMode::kBsp) {
    return absl::InvalidArgumentError("backup_workers applies to BSP only");
  }
  return absl::OkStatus();
}

namespace {

constexpr EnumName<WorkerState> kStateNames[] = {{WorkerState::kPending, "pending"},
                                                 {WorkerState::kLive, "live"},
                                                 {WorkerState::kExpired, "expired"}};

}  // namespace

const char* WorkerStateName(WorkerState state) { return NameIn(kStateNames, state); }

ConsistencyController::ConsistencyController(const ConsistencyOptions& options)
    : options_(options), workers_(options.num_workers) {
  assert(ValidateConsistencyOptions(options).ok());
}

int64_t ConsistencyController::Register(int rank) {
  Worker& w = workers_[rank];
  if (options_.mode == ConsistencyMode::kBsp && w.state == WorkerState::kExpired &&
      rounds_ > w.clock) {
    w.skipped += rounds_ - w.clock;
    w.clock = rounds_;
  }
  w.state = WorkerState::kLive;
  return w.clock;
}

void ConsistencyController::Expire(int rank) {
  if (workers_[rank].state == WorkerState::kLive) workers_[rank].state = WorkerState::kExpired;
}

int64_t ConsistencyController::MinClock() const {
  int64_t min_clock = std::numeric_limits<int64_t>::max();
  int64_t max_clock = 0;
  for (const Worker& w : workers_) {
    max_clock = std::max(max_clock, w.clock);
    if (w.state != WorkerState::kExpired) min_clock = std::min(min_clock, w.clock);
  }
  return min_clock == std::numeric_limits<int64_t>::max() ? max_clock : min_clock;
}

bool ConsistencyController::PullReady(int64_t clock) const {
  switch (options_.mode) {
    case ConsistencyMode::kBsp:
      return rounds_ >= clock;
    case ConsistencyMode::kSsp:
      return MinClock() >= clock - options_.staleness;
    case ConsistencyMode::kAsp:
      return true;
  }
  return true;
}

absl::StatusOr<PushAction> ConsistencyController::ClassifyPush(int rank, int64_t clock) const {
  const Worker& w = workers_[rank];
  if (clock < w.clock) return PushAction::kDuplicate;
  if (clock > w.clock) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", rank, " pushed clock ", clock, " but its next step is ", w.clock));
  }
  if (options_.mode != ConsistencyMode::kBsp) return PushAction::kApply;
  // A BSP worker can only push the open round (its pull of that step waited for the round), or,
  // with backup workers, a round already applied without it.
  if (clock < rounds_ && options_.backup_workers > 0) return PushAction::kLate;
  if (clock != rounds_) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", rank, " pushed clock ", clock,
                                                      " but the open BSP round is ", rounds_));
  }
  return PushAction::kBuffer;
}

void ConsistencyController::RecordPush(int rank) { ++workers_[rank].clock; }

bool ConsistencyController::RoundReady() const {
  if (options_.mode != ConsistencyMode::kBsp) return false;
  int members = 0;
  int pushed_members = 0;
  bool any = false;
  for (const Worker& w : workers_) {
    const bool pushed = w.clock > rounds_;
    any = any || pushed;
    if (w.state == WorkerState::kExpired) continue;
    ++members;
    pushed_members += pushed;
  }
  return any && pushed_members >= members - options_.backup_workers;
}

}  // namespace ps
