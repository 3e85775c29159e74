#ifndef PS_WORKER_SHARD_FANOUT_H_
#define PS_WORKER_SHARD_FANOUT_H_

// The client's calls to its shards, all in flight together on one completion queue: each call
// retries UNAVAILABLE (and CANCELLED from a shard that shut down) on its own, with exponential
// backoff, until `retry_for` has passed; a retry that lasts is reported every
// `report_unreachable_every`. Safe because every rpc is idempotent (pushes are deduplicated by
// clock). The calls in flight can be cancelled per shard (the shard restarted) or all at once.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace ps {

struct FanoutOptions {
  std::vector<std::string> servers;  // host:port per shard, for messages
  absl::Duration retry_for = absl::InfiniteDuration();
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration report_unreachable_every = absl::Seconds(10);
};

class ShardFanout {
 public:
  explicit ShardFanout(FanoutOptions options) : options_(std::move(options)) {}

  // Issues attempt of call i on `context` and `cq`: starts it and asks for its outcome in
  // `status`, delivered with `tag`.
  using Launch = std::function<void(size_t i, grpc::ClientContext* context,
                                    grpc::CompletionQueue* cq, grpc::Status* status, void* tag)>;
  // Sets a fresh context's deadline, wait-for-ready and metadata.
  using Prepare = std::function<void(grpc::ClientContext* context)>;

  struct Calls {
    const char* method = "";
    std::vector<int> shards;  // call i goes to shards[i]
    Launch launch;
    Prepare prepare;
    bool retry = true;  // false: one attempt each (heartbeats, which come again soon anyway)
    std::function<void(size_t)> on_ok;  // may be empty; runs on this thread as call i succeeds
    // If given: every call's outcome, not only the first error's, and the calls are independent
    // (a failure does not cancel the others). Otherwise the first call that fails for good
    // cancels the rest: the operation has failed.
    std::vector<absl::Status>* each_status = nullptr;
    // At most this many calls in flight (0: all of them), started in order, the next one as a
    // call ends for good. Only for calls that may wait for each other's shard never: a call held
    // by its shard (a pull waiting for its round) must not hold back a call that would release
    // it, so the pieces of one shard's transfer, not a fan-out over several shards.
    size_t max_in_flight = 0;
    // If given: how many times each call was sent (0: never started), whatever the outcome. A
    // call sent more than once may have reached its shard before the attempt that answered.
    std::vector<int>* attempts = nullptr;
  };
  // Runs the calls to their end. The error names the method and the shard; CANCELLED after
  // Cancel().
  absl::Status Run(const Calls& calls);

  // Cancels the calls in flight to `shard` as the shard would (CANCELLED, which is retried): for
  // calls that wait on a process that is gone. Returns how many.
  int CancelCallsTo(int shard);
  // Cancels every call in flight and fails later ones with CANCELLED; thread-safe.
  void Cancel();
  bool cancelled() const;

  const FanoutOptions& options() const { return options_; }

 private:
  class Run_;
  struct ActiveCall {
    grpc::ClientContext* context;
    int shard;
  };
  // Registers a started attempt (false: the fanout was cancelled, nothing registered).
  bool Register(grpc::ClientContext* context, int shard);
  void Unregister(grpc::ClientContext* context);

  const FanoutOptions options_;
  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<ActiveCall> active_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_WORKER_SHARD_FANOUT_H_
