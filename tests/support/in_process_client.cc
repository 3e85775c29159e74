#include "tests/support/in_process_client.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "server/service.h"
#include "worker/grpc_parameter_client.h"
#include "worker/sparse_routing.h"

namespace ps {

namespace {

// A pull held by the shards (BSP, SSP) waits at most this long, as the real client's deadline.
constexpr absl::Duration kPullDeadline = absl::Seconds(60);

}  // namespace

InProcessClient::InProcessClient(std::vector<Shard*> shards, uint64_t fingerprint,
                                 int64_t total_params, uint64_t incarnation, FaultSwitches* faults,
                                 InProcessCallCounts* counts)
    : shards_(std::move(shards)),
      fingerprint_(fingerprint),
      total_params_(total_params),
      incarnation_(incarnation),
      faults_(faults),
      counts_(counts != nullptr ? counts : &own_counts_) {}

Caller InProcessClient::caller(int shard) const {
  return Caller{rank_, incarnation_, shards_[shard]->options().incarnation};
}

std::vector<std::pair<int, KeyRange>> InProcessClient::WholeRanges() const {
  std::vector<std::pair<int, KeyRange>> ranges;
  const int n = static_cast<int>(shards_.size());
  for (int s = 0; s < n; ++s) ranges.emplace_back(s, ShardRange(total_params_, n, s));
  return ranges;
}

absl::Status InProcessClient::BeginCall(std::atomic<int>* counter) {
  ++*counter;
  const int call = ++data_calls_;
  if (cancelled_.load()) return absl::CancelledError("client cancelled");
  if (faults_ == nullptr) return absl::OkStatus();
  if (call == faults_->abort_call.load()) {
    return absl::AbortedError(absl::StrCat("injected: call ", call, " aborted; register again"));
  }
  if (faults_->delay > absl::ZeroDuration()) absl::SleepFor(faults_->delay);
  const bool push = counter == &counts_->pushes || counter == &counts_->push_pulls ||
                    counter == &counts_->push_parts;
  if (push && faults_->before_push) faults_->before_push();
  return absl::OkStatus();
}

absl::StatusOr<ClusterInfo> InProcessClient::Register(int rank, absl::Duration /*timeout*/) {
  rank_ = rank;
  WorkPlan plan;
  {
    std::lock_guard<std::mutex> lock(mu_);
    plan = plan_;
  }
  ClusterInfo info;
  info.num_shards = static_cast<int>(shards_.size());
  info.initialized = true;
  info.resume_clock = INT64_MAX;
  for (Shard* shard : shards_) {
    ASSIGN_OR_RETURN(const Shard::RegisterResult r,
                     shard->Register(rank, fingerprint_, incarnation_, plan));
    const ShardOptions& o = shard->options();
    info.num_workers = o.consistency.num_workers;
    info.mode = o.consistency.mode;
    info.staleness = o.consistency.staleness;
    info.lease = o.lease;
    info.resume_clock = std::min(info.resume_clock, r.clock);
    info.initialized = info.initialized && r.initialized;
    info.job_finished = info.job_finished || r.job_finished;
  }
  return info;
}

absl::Status InProcessClient::Heartbeat() {
  WorkPlan plan;
  {
    std::lock_guard<std::mutex> lock(mu_);
    plan = plan_;
  }
  absl::Status first;
  for (size_t s = 0; s < shards_.size(); ++s) {
    first.Update(shards_[s]->Heartbeat(caller(static_cast<int>(s)), plan));
  }
  return first;
}

absl::Status InProcessClient::Leave() {
  absl::Status first;
  for (size_t s = 0; s < shards_.size(); ++s) {
    first.Update(shards_[s]->Leave(caller(static_cast<int>(s))));
  }
  return first;
}

void InProcessClient::SetWorkPlan(int64_t steps, int64_t samples_per_step) {
  std::lock_guard<std::mutex> lock(mu_);
  plan_ = WorkPlan{steps, samples_per_step};
}

absl::Status InProcessClient::Init(absl::Span<const float> params) {
  for (const auto& [s, range] : WholeRanges()) {
    RETURN_IF_ERROR(shards_[s]
                        ->Init(fingerprint_, total_params_, range,
                               params.subspan(range.begin, range.size()), tables_)
                        .status());
  }
  return absl::OkStatus();
}

absl::StatusOr<PullStats> InProcessClient::PullRanges(
    int64_t clock, bool no_wait, absl::Span<float> params,
    const std::vector<std::pair<int, KeyRange>>& ranges,
    const std::function<void(size_t)>& after_each, absl::Span<const RowsToPull> rows) {
  RETURN_IF_ERROR(CheckRows(rows, tables_));
  const RowsByShard routed = RoutePull(rows, static_cast<int>(shards_.size()));
  PullStats stats;
  stats.versions.assign(shards_.size(), INT64_MAX);
  for (size_t i = 0; i < ranges.size(); ++i) {
    const auto& [s, range] = ranges[i];
    const Caller c = caller(s);
    Shard::PullArgs args{c, fingerprint_, range, clock, no_wait, {}};
    for (const RoutedRows& r : routed[s]) args.rows.push_back(SparseRows{r.table, r.keys, {}});
    ASSIGN_OR_RETURN(const Shard::PullResult r,
                     shards_[s]->Pull(args, absl::Now() + kPullDeadline,
                                      params.subspan(range.begin, range.size())));
    for (size_t e = 0; e < routed[s].size(); ++e) {
      const RoutedRows& asked = routed[s][e];
      const int64_t dim = tables_[asked.table].dim;
      for (size_t k = 0; k < asked.at.size(); ++k) {
        std::copy_n(r.rows[e].data() + k * dim, dim,
                    rows[asked.source].values.data() + asked.at[k] * dim);
      }
    }
    stats.versions[s] = std::min(stats.versions[s], r.version);
    stats.server_wait = std::max(stats.server_wait, r.waited);
    stats.payload_bytes += range.size() * static_cast<int64_t>(sizeof(float));
    if (after_each) after_each(i);
  }
  for (int64_t& v : stats.versions) {
    if (v == INT64_MAX) v = 0;  // a shard no range touched
  }
  return stats;
}

absl::StatusOr<PushStats> InProcessClient::PushRanges(
    int64_t clock, const std::vector<int64_t>& base_versions, absl::Span<const float> gradient,
    const std::vector<std::pair<int, KeyRange>>& ranges, absl::Span<const RowsToPush> rows) {
  RETURN_IF_ERROR(CheckRows(rows, tables_));
  const RowsByShard routed = RoutePush(rows, static_cast<int>(shards_.size()));
  PushStats stats;
  for (const auto& [s, range] : ranges) {
    const Caller c = caller(s);
    Shard::PushArgs args;
    args.caller = c;
    args.fingerprint = fingerprint_;
    args.range = range;
    args.clock = clock;
    args.base_version = base_versions[s];
    args.gradient = EncodedTensor::OfFloats(gradient.subspan(range.begin, range.size()));
    for (const RoutedRows& routed_rows : routed[s]) {
      SparseRows entry{routed_rows.table, routed_rows.keys, {}};
      const int64_t dim = tables_[routed_rows.table].dim;
      for (int32_t at : routed_rows.at) {
        const float* g = rows[routed_rows.source].gradients.data() + at * dim;
        entry.values.insert(entry.values.end(), g, g + dim);
      }
      args.rows.push_back(std::move(entry));
    }
    ASSIGN_OR_RETURN(const Shard::PushResult r, shards_[s]->Push(args));
    stats.payload_bytes += range.size() * static_cast<int64_t>(sizeof(float));
    if (r.staged) continue;  // the shard acts once the clock's other pieces are in
    stats.applied += r.applied;
    stats.buffered += r.buffered;
    stats.duplicates += r.duplicate;
    stats.dropped += r.dropped;
    stats.late += r.late;
    if (r.applied) stats.max_staleness = std::max(stats.max_staleness, r.staleness);
  }
  return stats;
}

absl::StatusOr<PullStats> InProcessClient::Pull(int64_t clock, bool no_wait,
                                                absl::Span<float> params) {
  return PullWithRows(clock, no_wait, params, {});
}

absl::StatusOr<PushStats> InProcessClient::Push(int64_t clock,
                                                const std::vector<int64_t>& base_versions,
                                                int num_samples, absl::Span<const float> gradient) {
  return PushWithRows(clock, base_versions, num_samples, gradient, {});
}

absl::StatusOr<PullStats> InProcessClient::PullWithRows(int64_t clock, bool no_wait,
                                                        absl::Span<float> params,
                                                        absl::Span<const RowsToPull> rows) {
  RETURN_IF_ERROR(BeginCall(&counts_->pulls));
  if (no_wait && faults_ != nullptr && faults_->before_observer_read) {
    faults_->before_observer_read();
  }
  return PullRanges(clock, no_wait, params, WholeRanges(), nullptr, rows);
}

absl::Status InProcessClient::PullRows(int64_t clock, absl::Span<const RowsToPull> rows) {
  RETURN_IF_ERROR(BeginCall(&counts_->pulls));
  std::vector<std::pair<int, KeyRange>> empty_ranges;  // rows alone, as GrpcParameterClient
  for (const auto& [s, range] : WholeRanges()) {
    empty_ranges.push_back({s, KeyRange{range.begin, range.begin}});
  }
  std::vector<float> unused(WholeRanges().empty() ? 0 : WholeRanges().back().second.end);
  return PullRanges(clock, /*no_wait=*/true, absl::MakeSpan(unused), empty_ranges, nullptr, rows)
      .status();
}

absl::StatusOr<PushStats> InProcessClient::PushWithRows(int64_t clock,
                                                        const std::vector<int64_t>& base_versions,
                                                        int /*num_samples*/,
                                                        absl::Span<const float> gradient,
                                                        absl::Span<const RowsToPush> rows) {
  RETURN_IF_ERROR(BeginCall(&counts_->pushes));
  return WholePush(clock, base_versions, gradient, rows);
}

absl::StatusOr<PushStats> InProcessClient::WholePush(int64_t clock,
                                                     const std::vector<int64_t>& base_versions,
                                                     absl::Span<const float> gradient,
                                                     absl::Span<const RowsToPush> rows) {
  const int push = ++push_calls_;
  ASSIGN_OR_RETURN(PushStats stats,
                   PushRanges(clock, base_versions, gradient, WholeRanges(), rows));
  if (faults_ != nullptr && push == faults_->drop_push_reply.load()) {
    return PushRanges(clock, base_versions, gradient, WholeRanges(), rows);  // the retry's answer
  }
  return stats;
}

absl::StatusOr<PushPullStats> InProcessClient::PushPull(
    int64_t clock, const std::vector<int64_t>& base_versions, int /*num_samples*/,
    absl::Span<const float> gradient, int64_t pull_clock, absl::Span<float> params) {
  RETURN_IF_ERROR(BeginCall(&counts_->push_pulls));
  PushPullStats stats;
  ASSIGN_OR_RETURN(stats.pushed, WholePush(clock, base_versions, gradient));
  ASSIGN_OR_RETURN(stats.pulled,
                   PullRanges(pull_clock, /*no_wait=*/false, params, WholeRanges(), nullptr));
  return stats;
}

namespace {

// `parts` cut at the shards' boundaries: (shard, piece) in part order, and each piece's part.
void CutParts(absl::Span<const KeyRange> parts, const std::vector<std::pair<int, KeyRange>>& whole,
              std::vector<std::pair<int, KeyRange>>* pieces, std::vector<size_t>* part_of) {
  for (size_t p = 0; p < parts.size(); ++p) {
    for (const auto& [s, range] : whole) {
      const KeyRange piece{std::max(parts[p].begin, range.begin),
                           std::min(parts[p].end, range.end)};
      if (piece.size() <= 0) continue;
      pieces->emplace_back(s, piece);
      part_of->push_back(p);
    }
  }
}

}  // namespace

absl::StatusOr<PullStats> InProcessClient::PullParts(int64_t clock,
                                                     absl::Span<const KeyRange> parts,
                                                     absl::Span<float> params,
                                                     const std::function<void(size_t)>& on_part) {
  RETURN_IF_ERROR(BeginCall(&counts_->pull_parts));
  std::vector<std::pair<int, KeyRange>> pieces;
  std::vector<size_t> part_of;
  CutParts(parts, WholeRanges(), &pieces, &part_of);
  // A part has arrived once its last piece has (pieces come in part order).
  return PullRanges(clock, /*no_wait=*/false, params, pieces, [&](size_t i) {
    if ((i + 1 == pieces.size() || part_of[i + 1] != part_of[i]) && on_part) on_part(part_of[i]);
  });
}

absl::StatusOr<PushStats> InProcessClient::PushParts(int64_t clock,
                                                     const std::vector<int64_t>& base_versions,
                                                     int /*num_samples*/,
                                                     absl::Span<const float> gradient,
                                                     absl::Span<const KeyRange> parts) {
  RETURN_IF_ERROR(BeginCall(&counts_->push_parts));
  std::vector<std::pair<int, KeyRange>> pieces;
  std::vector<size_t> part_of;
  CutParts(parts, WholeRanges(), &pieces, &part_of);
  return PushRanges(clock, base_versions, gradient, pieces);
}

// Through the service's answer and the gRPC client's reading of it, so that a report here is
// the one a real worker would get (the service adds no state of its own to a fresh shard's).
absl::StatusOr<std::vector<ShardReport>> InProcessClient::Status() {
  std::vector<ShardReport> reports;
  for (Shard* shard : shards_) {
    ParameterServerService service(*shard, ServiceOptions{});
    ps::v1::GetStatusResponse response;
    const grpc::Status answered = service.HandleGetStatus(&response);
    if (!answered.ok()) return absl::InternalError(answered.error_message());
    ASSIGN_OR_RETURN(ShardReport report, ShardReportFromResponse(response));
    reports.push_back(std::move(report));
  }
  return reports;
}

}  // namespace ps
