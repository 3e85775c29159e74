// Shard's membership: which ranks are in the job and for how long. Registration (a new process
// of a rank, its work plan), heartbeats and the lease thread that expires silent workers; the
// checks every call of a worker passes (rank, incarnation, liveness).

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "server/shard.h"

namespace ps {

absl::Status Shard::CheckRank(int rank) const {
  if (rank < 0 || rank >= options_.consistency.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not in [0, ", options_.consistency.num_workers, ")"));
  }
  return absl::OkStatus();
}

void Shard::RenewLease(int rank) { lease_deadline_[rank] = absl::Now() + options_.lease; }

absl::Status Shard::CheckIncarnation(const Caller& caller) const {
  const int rank = caller.rank;
  const uint64_t incarnation = caller.incarnation;
  const uint64_t shard_incarnation = caller.shard_incarnation;
  if (shard_incarnation != 0 && shard_incarnation != options_.incarnation) {
    return absl::AbortedError(absl::StrCat(
        "shard ", options_.shard_id, " restarted since worker ", rank, " registered (incarnation ",
        options_.incarnation, ", the worker knows ", shard_incarnation, "); register again"));
  }
  if (incarnation != 0 && incarnations_[rank] != 0 && incarnation != incarnations_[rank]) {
    return absl::AbortedError(absl::StrCat("rank ", rank, " is held by another worker process (",
                                           "incarnation ", incarnations_[rank], ", caller ",
                                           incarnation, "); register again"));
  }
  return absl::OkStatus();
}

namespace {

absl::Status ValidatePlan(const WorkPlan& plan) {
  if (plan.steps < 0 || plan.samples_per_step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("a work plan of ", plan.steps, " steps of ",
                                                   plan.samples_per_step, " samples"));
  }
  return absl::OkStatus();
}

}  // namespace

bool Shard::JobFinished() const {
  for (int r = 0; r < options_.consistency.num_workers; ++r) {
    if (plans_[r].steps <= 0 || controller_.clock(r) < plans_[r].steps) return false;
  }
  return true;
}

void Shard::RecordPlan(int rank, const WorkPlan& plan) {
  if (plan.steps <= 0) return;
  plans_[rank] = plan;
  const OptimizerOptions& o = options_.optimizer;
  if (o.schedule == LrSchedule::kCosine && decay_updates_ == 0) {
    decay_updates_ =
        RunDecayUpdates(plan.steps, options_.consistency.num_workers,
                        options_.consistency.mode == ConsistencyMode::kBsp, o.warmup_updates);
    if (optimizer_ != nullptr) optimizer_->set_decay_updates(decay_updates_);
  }
}

absl::StatusOr<Shard::RegisterResult> Shard::Register(int rank, uint64_t fingerprint,
                                                      uint64_t incarnation, const WorkPlan& plan) {
  RETURN_IF_ERROR(CheckRank(rank));
  RETURN_IF_ERROR(ValidatePlan(plan));
  absl::MutexLock lock(&mu_);
  if (shutdown_) return absl::UnavailableError("shard is shutting down");
  if (initialized_ && fingerprint != fingerprint_) {
    return absl::FailedPreconditionError(absl::StrCat("layout fingerprint ", fingerprint,
                                                      " differs from the shard's ", fingerprint_,
                                                      ": the worker runs another model"));
  }
  used_ = true;
  RegisterResult result;
  result.job_finished = JobFinished();
  if (result.job_finished && incarnation != 0 && incarnation != incarnations_[rank]) {
    rerun_at_version_ = version_;
  }
  if (incarnation != 0) incarnations_[rank] = incarnation;
  result.clock = controller_.Register(rank);
  staged_[rank].clock = -1;  // a new process pushes its clock afresh
  result.initialized = initialized_;
  RecordPlan(rank, plan);
  RenewLease(rank);
  lease_changed_ = true;
  return result;
}

absl::Status Shard::Heartbeat(const Caller& caller, const WorkPlan& plan) {
  RETURN_IF_ERROR(CheckRank(caller.rank));
  RETURN_IF_ERROR(ValidatePlan(plan));
  absl::MutexLock lock(&mu_);
  if (shutdown_) return absl::UnavailableError("shard is shutting down");
  RETURN_IF_ERROR(CheckIncarnation(caller));
  RETURN_IF_ERROR(CheckLive(caller.rank, absl::StatusCode::kNotFound));
  RecordPlan(caller.rank, plan);
  RenewLease(caller.rank);
  return absl::OkStatus();
}

absl::Status Shard::Leave(const Caller& caller) {
  RETURN_IF_ERROR(CheckRank(caller.rank));
  absl::MutexLock lock(&mu_);
  if (shutdown_) return absl::UnavailableError("shard is shutting down");
  RETURN_IF_ERROR(CheckIncarnation(caller));
  if (controller_.state(caller.rank) != WorkerState::kLive) return absl::OkStatus();
  lease_deadline_[caller.rank] = absl::InfinitePast();
  lease_changed_ = true;  // the lease thread expires it now, as any other
  return absl::OkStatus();
}

absl::Status Shard::CheckLive(int rank, absl::StatusCode if_pending) const {
  switch (controller_.state(rank)) {
    case WorkerState::kPending:
      return absl::Status(if_pending, absl::StrCat("worker ", rank, " has not registered"));
    case WorkerState::kExpired:
      return absl::AbortedError(
          absl::StrCat("the lease of worker ", rank, " expired; register again"));
    case WorkerState::kLive:
      break;
  }
  return absl::OkStatus();
}

void Shard::LeaseLoop() {
  std::vector<std::function<void()>> completions;
  mu_.Lock();
  while (!shutdown_) {
    absl::Time next = absl::InfiniteFuture();
    const absl::Time now = absl::Now();
    for (int r = 0; r < options_.consistency.num_workers; ++r) {
      if (controller_.state(r) != WorkerState::kLive) continue;
      if (lease_deadline_[r] <= now) {
        controller_.Expire(r);
        MaybeApplyRound();
      } else {
        next = std::min(next, lease_deadline_[r]);
      }
    }
    // An expiry may let waiting pulls go on; the others may have reached their deadlines.
    FinishWaitingPulls(&completions);
    for (const WaitingPull& w : waiting_pulls_) next = std::min(next, w.deadline);
    if (!completions.empty()) {
      mu_.Unlock();
      for (auto& complete : completions) complete();
      completions.clear();
      mu_.Lock();
      continue;  // the state may have changed while unlocked
    }
    lease_changed_ = false;
    auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shutdown_ || lease_changed_; };
    mu_.AwaitWithDeadline(absl::Condition(&wake), next);
  }
  mu_.Unlock();
}

}  // namespace ps
