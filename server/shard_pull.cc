// Shard's pull path: a pull waits (without holding its caller's thread, PullAsync) until the
// consistency mode allows its step, then reads the slice under the shard's lock. Pushes, lease
// expiry, deadlines and Shutdown settle waiting pulls (FinishWaitingPulls).

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/base/status_macros.h"
#include "server/shard.h"

namespace ps {

absl::StatusOr<Shard::PullResult> Shard::Pull(const PullArgs& args, absl::Time deadline,
                                              absl::Span<float> out) {
  if (static_cast<int64_t>(out.size()) != args.range.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pull buffer of ", out.size(), " values for a range of ", args.range.size()));
  }
  return Pull(args, deadline, [out](absl::Span<const float> values) {
    std::copy(values.begin(), values.end(), out.begin());
  });
}

absl::StatusOr<Shard::PullResult> Shard::Pull(const PullArgs& args, absl::Time deadline,
                                              const SliceReader& read) {
  absl::Notification finished;
  absl::StatusOr<PullResult> out;
  PullAsync(args, deadline, read, [&](absl::StatusOr<PullResult> r) {
    out = std::move(r);
    finished.Notify();
  });
  finished.WaitForNotification();
  return out;
}

int64_t Shard::PullAsync(const PullArgs& args, absl::Time deadline, SliceReader read,
                         PullDone done) {
  // A no-wait read is an observer's (evaluation, monitoring): it needs no worker identity.
  const bool observer = args.no_wait;
  absl::StatusOr<PullResult> now_result;
  {
    absl::Status s = observer ? absl::OkStatus() : CheckRank(args.caller.rank);
    absl::MutexLock lock(&mu_);
    // Incarnations first, as for pushes (AdmitPushLocked).
    if (s.ok() && !observer) {
      s = CheckIncarnation(args.caller);
    }
    if (s.ok()) {
      s = ValidateAccess(args.caller.rank, args.fingerprint, args.range,
                         static_cast<size_t>(args.range.size()),
                         observer ? Access::kObserve : Access::kPull);
    }
    if (s.ok()) s = ValidateRowsLocked(args.rows, /*with_values=*/false);
    if (!s.ok()) {
      now_result = s;
    } else {
      if (!observer) {
        RenewLease(args.caller.rank);
        RecordPulledKeysLocked(args.caller.rank, args.clock, args.rows);
      }
      const absl::Time now = absl::Now();
      if (observer || controller_.PullReady(args.clock)) {
        now_result = ReadSliceLocked(args, now, now, read);
      } else if (deadline <= now) {
        now_result = PullTimedOut(args);
      } else {
        const int64_t id = next_pull_id_++;
        waiting_pulls_.push_back(
            WaitingPull{id, args, deadline, now, std::move(read), std::move(done)});
        lease_changed_ = true;  // the lease thread also keeps the waiting pulls' deadlines
        return id;
      }
    }
  }
  done(std::move(now_result));
  return 0;
}

void Shard::CancelPull(int64_t id) {
  PullDone done;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = waiting_pulls_.begin(); it != waiting_pulls_.end(); ++it) {
      if (it->id != id) continue;
      done = std::move(it->done);
      waiting_pulls_.erase(it);
      break;
    }
  }
  if (done) done(absl::CancelledError("the pull was cancelled by its caller"));
}

absl::StatusOr<Shard::PullResult> Shard::ReadSliceLocked(const PullArgs& args, absl::Time start,
                                                         absl::Time now, const SliceReader& read) {
  const int64_t offset = args.range.begin - range_.begin;
  const absl::Span<const float> part = values_.view().subspan(offset, args.range.size());
  read(part);
  if (!args.no_wait && !pulled_values_.empty()) {
    std::vector<float>& backup = pulled_values_[args.caller.rank];
    if (args.range == range_) {
      backup = values_.values();
    } else if (backup.size() == values_.size()) {
      std::copy(part.begin(), part.end(), backup.begin() + offset);
    }  // a first pull in pieces: DC-ASGD compensates once the worker has pulled the slice whole
  }
  PullResult result;
  if (!args.rows.empty()) {
    const absl::Time rows_start = absl::Now();
    result.rows = ReadRowsLocked(args.rows);
    ++sparse_timing_.pulls;
    sparse_timing_.pull_seconds += absl::ToDoubleSeconds(absl::Now() - rows_start);
  }
  if (args.lend) result.loan = values_.Lend();
  result.version = version_;
  result.min_clock = controller_.MinClock();
  result.waited = now - start;
  return result;
}

absl::Status Shard::PullTimedOut(const PullArgs& args) const {
  return absl::DeadlineExceededError(absl::StrCat(
      "pull of clock ", args.clock, " by worker ", args.caller.rank, " still waits (min clock ",
      controller_.MinClock(), ", version ", version_, ")"));
}

void Shard::FinishWaitingPulls(std::vector<std::function<void()>>* completions) {
  if (waiting_pulls_.empty()) return;
  const absl::Time now = absl::Now();
  for (auto it = waiting_pulls_.begin(); it != waiting_pulls_.end();) {
    absl::StatusOr<PullResult> result;
    if (shutdown_) {
      result = absl::UnavailableError("shard is shutting down");
    } else if (controller_.PullReady(it->args.clock)) {
      // Another process may have taken the rank while this pull waited.
      const absl::Status s = CheckIncarnation(it->args.caller);
      if (s.ok()) {
        result = ReadSliceLocked(it->args, it->start, now, it->read);
      } else {
        result = s;
      }
    } else if (it->deadline <= now) {
      result = PullTimedOut(it->args);
    } else {
      ++it;
      continue;
    }
    completions->push_back(
        [done = std::move(it->done), r = std::move(result)]() mutable { done(std::move(r)); });
    it = waiting_pulls_.erase(it);
  }
}

}  // namespace ps
