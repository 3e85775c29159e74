#include "worker/shard_fanout.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/transport/grpc_status.h"
#include "spdlog/spdlog.h"

namespace ps {

bool ShardFanout::Register(grpc::ClientContext* context, int shard) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return false;
  active_.push_back(ActiveCall{context, shard});
  return true;
}

void ShardFanout::Unregister(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  active_.erase(std::remove_if(active_.begin(), active_.end(),
                               [&](const ActiveCall& a) { return a.context == context; }),
                active_.end());
}

int ShardFanout::CancelCallsTo(int shard) {
  absl::MutexLock lock(&mu_);
  int cancelled = 0;
  for (const ActiveCall& call : active_) {
    if (call.shard != shard) continue;
    call.context->TryCancel();
    ++cancelled;
  }
  return cancelled;
}

void ShardFanout::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (const ActiveCall& call : active_) call.context->TryCancel();
}

bool ShardFanout::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

// One Run: its calls' attempts, retries and outcome. Each call retries on its own: a call to a
// healthy shard may wait (a pull held for its round) for progress that needs this worker's retry
// to another shard, so no retry waits for the other calls.
class ShardFanout::Run_ {
 public:
  Run_(ShardFanout& fanout, const Calls& calls)
      : fanout_(fanout),
        options_(fanout.options_),
        calls_(calls),
        independent_(calls.each_status != nullptr),
        attempts_(calls.shards.size()),
        first_try_(absl::Now()),
        give_up_(calls.retry ? first_try_ + options_.retry_for : first_try_),
        window_(calls.max_in_flight > 0 ? calls.max_in_flight : calls.shards.size()),
        next_report_(first_try_ + options_.report_unreachable_every) {
    if (independent_) calls.each_status->assign(calls.shards.size(), absl::OkStatus());
  }

  absl::Status Run() {
    for (Attempt& a : attempts_) a.backoff = options_.initial_backoff;
    while (unstarted_ < attempts_.size() && in_flight_ < window_) Launch(unstarted_++);
    while (in_flight_ > 0 || waiting_ > 0) {
      // Wake for the earliest retry due, and now and then to notice Cancel().
      absl::Time wake = absl::Now() + absl::Milliseconds(200);
      for (const Attempt& a : attempts_) wake = std::min(wake, a.retry_at);
      void* tag = nullptr;
      bool ok = false;
      if (cq_.AsyncNext(&tag, &ok, absl::ToChronoTime(wake)) == grpc::CompletionQueue::TIMEOUT) {
        StartDueRetries();
      } else {
        Completed(reinterpret_cast<size_t>(tag));
      }
    }
    if (!first_error_.ok()) return first_error_;
    if (unstarted_ < attempts_.size()) {  // never so: Ended() starts one per call that ends
      return absl::InternalError(absl::StrCat(calls_.method, ": ", attempts_.size() - unstarted_,
                                              " calls were never started"));
    }
    if (reported_) {
      spdlog::info("{}: every shard answers again, after {:.0f}s", calls_.method,
                   absl::ToDoubleSeconds(absl::Now() - first_try_));
    }
    return absl::OkStatus();
  }

  void CountAttempts(std::vector<int>* out) const {
    out->resize(attempts_.size());
    for (size_t i = 0; i < attempts_.size(); ++i) (*out)[i] = attempts_[i].attempts;
  }

 private:
  struct Attempt {
    std::unique_ptr<grpc::ClientContext> context;
    grpc::Status status;
    int attempts = 0;
    absl::Duration backoff;
    absl::Time retry_at = absl::InfiniteFuture();  // finite while a retry waits
    bool in_flight = false;
  };

  absl::Status Cancelled() const {
    return absl::CancelledError(absl::StrCat(calls_.method, ": client cancelled"));
  }

  // Call i has ended for good: the next call not started yet takes its place in the window.
  // Dependent calls stop starting once one has failed (the operation has); the ones never
  // started are then not attempted.
  void Ended() {
    if (unstarted_ < attempts_.size() && (first_error_.ok() || independent_)) {
      Launch(unstarted_++);
    } else if (unstarted_ < attempts_.size()) {
      unstarted_ = attempts_.size();
    }
  }

  // Records call i's failure; the first one of dependent calls cancels the others.
  void FailWith(size_t i, absl::Status error) {
    if (independent_) (*calls_.each_status)[i] = error;
    if (first_error_.ok()) {
      first_error_ = std::move(error);
      if (!independent_) {
        absl::MutexLock lock(&fanout_.mu_);
        for (Attempt& a : attempts_) {
          if (a.in_flight) a.context->TryCancel();
        }
      }
    }
    Ended();
  }

  // Starts call i's next attempt, or fails it with CANCELLED when the fanout was cancelled.
  void Launch(size_t i) {
    Attempt& a = attempts_[i];
    a.retry_at = absl::InfiniteFuture();
    a.context = std::make_unique<grpc::ClientContext>();
    calls_.prepare(a.context.get());
    if (!fanout_.Register(a.context.get(), calls_.shards[i])) {
      FailWith(i, Cancelled());
      return;
    }
    ++a.attempts;
    calls_.launch(i, a.context.get(), &cq_, &a.status, reinterpret_cast<void*>(i));
    a.in_flight = true;
    ++in_flight_;
  }

  // Starts the retries that are due; drops them all once the operation has failed or the
  // fanout was cancelled.
  void StartDueRetries() {
    const bool cancelled = fanout_.cancelled();
    for (size_t i = 0; i < attempts_.size(); ++i) {
      Attempt& a = attempts_[i];
      if (a.retry_at == absl::InfiniteFuture()) continue;
      if ((!first_error_.ok() && !independent_) || cancelled) {
        a.retry_at = absl::InfiniteFuture();
        --waiting_;
        if (first_error_.ok() || independent_) FailWith(i, Cancelled());
      } else if (absl::Now() >= a.retry_at) {
        --waiting_;
        Launch(i);
      }
    }
  }

  // Call i's attempt has finished: success, a retry scheduled, or a failure for good.
  void Completed(size_t i) {
    Attempt& a = attempts_[i];
    a.in_flight = false;
    --in_flight_;
    fanout_.Unregister(a.context.get());
    if (a.status.ok()) {
      if (calls_.on_ok && first_error_.ok()) calls_.on_ok(i);
      Ended();
      return;
    }
    if (!first_error_.ok() && !independent_) return;  // cancelled: another call failed
    // A server that shuts down cancels the calls it has not started (CANCELLED); unless this
    // client cancelled them itself, that is as retryable as UNAVAILABLE.
    const bool retryable =
        a.status.error_code() == grpc::StatusCode::UNAVAILABLE ||
        (a.status.error_code() == grpc::StatusCode::CANCELLED && !fanout_.cancelled());
    if (retryable && absl::Now() + a.backoff < give_up_) {
      a.retry_at = absl::Now() + a.backoff;
      a.backoff = std::min(a.backoff * 2, absl::Seconds(5));
      ++waiting_;
      ReportRetry(i);
      return;
    }
    const int shard = calls_.shards[i];
    FailWith(i, FromGrpcStatus(a.status, absl::StrCat(calls_.method, " to shard ", shard, " (",
                                                      options_.servers[shard], ")",
                                                      a.attempts > 1 ? " after retries" : "")));
  }

  // Retries that last are reported, so an operator sees which shard the job waits for.
  void ReportRetry(size_t i) {
    if (absl::Now() < next_report_) return;
    const int shard = calls_.shards[i];
    spdlog::warn("{}: shard {} ({}) unreachable for {:.0f}s ({}); still retrying{}", calls_.method,
                 shard, options_.servers[shard], absl::ToDoubleSeconds(absl::Now() - first_try_),
                 attempts_[i].status.error_message(),
                 options_.retry_for == absl::InfiniteDuration()
                     ? " until it is back"
                     : absl::StrCat(" for up to ", absl::ToDoubleSeconds(options_.retry_for), "s"));
    next_report_ = absl::Now() + options_.report_unreachable_every;
    reported_ = true;
  }

  ShardFanout& fanout_;
  const FanoutOptions& options_;
  const Calls& calls_;
  const bool independent_;
  std::vector<Attempt> attempts_;
  grpc::CompletionQueue cq_;
  const absl::Time first_try_;
  const absl::Time give_up_;
  const size_t window_;   // calls in flight at most
  size_t unstarted_ = 0;  // calls [unstarted_, size) have not been started
  absl::Time next_report_;
  bool reported_ = false;
  absl::Status first_error_;
  size_t in_flight_ = 0, waiting_ = 0;
};

absl::Status ShardFanout::Run(const Calls& calls) {
  Run_ run(*this, calls);
  absl::Status status = run.Run();
  if (calls.attempts != nullptr) run.CountAttempts(calls.attempts);
  return status;
}

}  // namespace ps
