#ifndef PS_TESTS_SUPPORT_IN_PROCESS_CLIENT_H_
#define PS_TESTS_SUPPORT_IN_PROCESS_CLIENT_H_

// A ParameterClient that calls Shard objects in this process directly: no sockets, no threads of
// its own, no serialisation. Trainer tests use it to check schedules and accounting without the
// transport, and its fault switches (in the spirit of leveldb's SpecialEnv) to make the faults a
// real cluster has, on the call they choose:
// - abort_call N: the Nth data call (Pull, Push, PushPull, PullParts or PushParts; 1-based)
//   answers ABORTED without reaching the shards, as after a shard restart;
// - drop_push_reply N: the Nth push (Push or PushPull) reaches the shards, its reply is lost,
//   and it is sent again, as the real client retries an UNAVAILABLE answer (the shards answer
//   the second as a duplicate);
// - delay: every data call first sleeps this long;
// - before_push, before_observer_read: run on the caller's thread at the start of every push
//   (Push, PushPull, PushParts) and of every Pull with no_wait (an evaluation's read), to hold
//   the call until the test lets it go, or to see which thread makes it.
// The shards keep their own rules: lease expiry (a fake that stops beating expires as a real
// worker would), BSP barriers (a Pull blocks the caller's thread), exactly-once pushes.

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "server/shard.h"
#include "worker/parameter_client.h"

namespace ps {

struct FaultSwitches {
  std::atomic<int> abort_call{0};
  std::atomic<int> drop_push_reply{0};
  absl::Duration delay;
  std::function<void()> before_push;
  std::function<void()> before_observer_read;
};

// Calls per kind, counted as they are made (an aborted call counts).
struct InProcessCallCounts {
  std::atomic<int> pulls{0}, pushes{0}, push_pulls{0}, pull_parts{0}, push_parts{0};
};

class InProcessClient final : public ParameterClient {
 public:
  // `shards` in shard order, all outliving the client; `faults` and `counts` may be null.
  InProcessClient(std::vector<Shard*> shards, uint64_t fingerprint, int64_t total_params,
                  uint64_t incarnation = 1, FaultSwitches* faults = nullptr,
                  InProcessCallCounts* counts = nullptr);

  absl::StatusOr<ClusterInfo> Register(int rank, absl::Duration timeout) override;
  absl::Status Heartbeat() override;
  absl::Status Leave() override;
  void SetWorkPlan(int64_t steps, int64_t samples_per_step) override;
  absl::Status Init(absl::Span<const float> params) override;
  absl::StatusOr<PullStats> Pull(int64_t clock, bool no_wait, absl::Span<float> params) override;
  absl::StatusOr<PushStats> Push(int64_t clock, const std::vector<int64_t>& base_versions,
                                 int num_samples, absl::Span<const float> gradient) override;
  absl::StatusOr<PushPullStats> PushPull(int64_t clock, const std::vector<int64_t>& base_versions,
                                         int num_samples, absl::Span<const float> gradient,
                                         int64_t pull_clock, absl::Span<float> params) override;
  absl::StatusOr<PullStats> PullParts(int64_t clock, absl::Span<const KeyRange> parts,
                                      absl::Span<float> params,
                                      const std::function<void(size_t)>& on_part) override;
  absl::StatusOr<PushStats> PushParts(int64_t clock, const std::vector<int64_t>& base_versions,
                                      int num_samples, absl::Span<const float> gradient,
                                      absl::Span<const KeyRange> parts) override;
  absl::StatusOr<PullStats> PullWithRows(int64_t clock, bool no_wait, absl::Span<float> params,
                                         absl::Span<const RowsToPull> rows) override;
  absl::Status PullRows(int64_t clock, absl::Span<const RowsToPull> rows) override;
  absl::StatusOr<PushStats> PushWithRows(int64_t clock, const std::vector<int64_t>& base_versions,
                                         int num_samples, absl::Span<const float> gradient,
                                         absl::Span<const RowsToPush> rows) override;
  absl::StatusOr<std::vector<ShardReport>> Status() override;
  void Cancel() override { cancelled_.store(true); }
  // The model's sparse tables, declared to the shards by Init (before it).
  void set_tables(std::vector<SparseTableSpec> tables) { tables_ = std::move(tables); }

 private:
  // Counts a data call and applies the switches: ABORTED for the chosen call, CANCELLED after
  // Cancel(), the delay otherwise.
  absl::Status BeginCall(std::atomic<int>* counter);
  // The shards' answers to one push of `ranges` (each within one shard's range), summed.
  // Sparse rows go with the whole ranges' calls (one per shard).
  absl::StatusOr<PushStats> PushRanges(int64_t clock, const std::vector<int64_t>& base_versions,
                                       absl::Span<const float> gradient,
                                       const std::vector<std::pair<int, KeyRange>>& ranges,
                                       absl::Span<const RowsToPush> rows = {});
  // A whole push (Push or PushPull) as the real client makes it: numbered for drop_push_reply,
  // and, when that switch picks it, sent a second time, whose answer (a duplicate's) is returned.
  absl::StatusOr<PushStats> WholePush(int64_t clock, const std::vector<int64_t>& base_versions,
                                      absl::Span<const float> gradient,
                                      absl::Span<const RowsToPush> rows = {});
  absl::StatusOr<PullStats> PullRanges(int64_t clock, bool no_wait, absl::Span<float> params,
                                       const std::vector<std::pair<int, KeyRange>>& ranges,
                                       const std::function<void(size_t)>& after_each,
                                       absl::Span<const RowsToPull> rows = {});
  Caller caller(int shard) const;
  std::vector<std::pair<int, KeyRange>> WholeRanges() const;  // (shard, its range)

  const std::vector<Shard*> shards_;
  const uint64_t fingerprint_;
  std::vector<SparseTableSpec> tables_;
  const int64_t total_params_;
  const uint64_t incarnation_;
  FaultSwitches* faults_;
  InProcessCallCounts* counts_;
  InProcessCallCounts own_counts_;
  std::atomic<int> data_calls_{0};
  std::atomic<int> push_calls_{0};
  std::atomic<bool> cancelled_{false};
  int rank_ = 0;
  std::mutex mu_;
  WorkPlan plan_;
};

}  // namespace ps

#endif  // PS_TESTS_SUPPORT_IN_PROCESS_CLIENT_H_
