#include "server/shard.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace ps {

namespace {

// The floats of a dense float32 tensor that lies in one aligned piece; null otherwise.
const float* ContiguousFloats(const EncodedTensor& t) {
  if (t.encoding() != TensorEncoding::kF32 || t.pieces().size() != 1) return nullptr;
  const PayloadPiece& piece = t.pieces()[0];
  if (piece.first != 0 || piece.count != t.size() ||
      reinterpret_cast<uintptr_t>(piece.data) % alignof(float) != 0) {
    return nullptr;
  }
  return reinterpret_cast<const float*>(piece.data);
}

bool AllFinite(absl::Span<const float> values) {
  // Accumulating x - x yields NaN exactly when some x is NaN or Inf; one branch-free pass.
  float acc = 0.0f;
  for (float x : values) acc += x - x;
  return acc == 0.0f;
}

}  // namespace

absl::Status ValidateShardOptions(const ShardOptions& options) {
  if (options.num_shards < 1 || options.shard_id < 0 || options.shard_id >= options.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard_id ", options.shard_id, " is not in [0, ", options.num_shards, ")"));
  }
  RETURN_IF_ERROR(ValidateConsistencyOptions(options.consistency));
  RETURN_IF_ERROR(ValidateOptimizerOptions(options.optimizer));
  RETURN_IF_ERROR(ValidateUpdateRuleOptions(options.update_rule));
  if (options.lease <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("lease must be positive");
  }
  if (options.incarnation == 0) return absl::InvalidArgumentError("incarnation must be non-zero");
  if (options.snapshot_every_updates < 0) {
    return absl::InvalidArgumentError("snapshot_every_updates must be >= 0");
  }
  if (options.full_snapshot_every < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("full_snapshot_every must be >= 1 (1: every snapshot full), got ",
                     options.full_snapshot_every));
  }
  RETURN_IF_ERROR(ValidateSparseOptimizerOptions(options.sparse_optimizer));
  return ValidateSparseMemoryOptions(options.sparse_memory);
}

absl::StatusOr<std::unique_ptr<Shard>> Shard::Create(const ShardOptions& options) {
  RETURN_IF_ERROR(ValidateShardOptions(options));
  return std::unique_ptr<Shard>(new Shard(options));
}

Shard::Shard(const ShardOptions& options)
    : options_(options),
      plans_(options.consistency.num_workers),
      decay_updates_(options.optimizer.decay_updates),
      incarnations_(options.consistency.num_workers, 0),
      controller_(options.consistency),
      lease_deadline_(options.consistency.num_workers, absl::InfiniteFuture()),
      staleness_(options.consistency.num_workers),
      dropped_(options.consistency.num_workers, 0),
      late_(options.consistency.num_workers, 0),
      pulled_values_(
          options.update_rule.rule == UpdateRule::kDcAsgd ? options.consistency.num_workers : 0),
      round_gradients_(options.consistency.num_workers),
      round_base_versions_(options.consistency.num_workers, 0),
      round_has_gradient_(options.consistency.num_workers, false),
      round_rows_(options.consistency.num_workers),
      staged_(options.consistency.num_workers),
      pulled_keys_(options.consistency.num_workers) {
  lease_thread_ = std::thread([this] { LeaseLoop(); });
}

Shard::~Shard() { Shutdown(); }

void Shard::Shutdown() {
  std::vector<std::function<void()>> completions;
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    FinishWaitingPulls(&completions);  // every waiting pull: UNAVAILABLE
  }
  for (auto& complete : completions) complete();
  if (lease_thread_.joinable()) lease_thread_.join();
}

absl::StatusOr<Shard::InitResult> Shard::Init(uint64_t fingerprint, int64_t total_params,
                                              KeyRange range, absl::Span<const float> values,
                                              const std::vector<SparseTableSpec>& tables) {
  if (total_params < 0) return absl::InvalidArgumentError("total_params < 0");
  const KeyRange mine = ShardRange(total_params, options_.num_shards, options_.shard_id);
  if (!(range == mine)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard ", options_.shard_id, " of ", options_.num_shards, " owns [", mine.begin, ", ",
        mine.end, ") of ", total_params, " but Init names [", range.begin, ", ", range.end, ")"));
  }
  if (static_cast<int64_t>(values.size()) != range.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Init carries ", values.size(), " values for a range of ", range.size()));
  }
  if (!AllFinite(values)) return absl::InvalidArgumentError("Init values contain NaN or Inf");
  for (const SparseTableSpec& t : tables) {
    if (t.name.empty() || t.dim < 1 || !(t.init_scale > 0) || !std::isfinite(t.init_scale)) {
      return absl::InvalidArgumentError(absl::StrCat("sparse table '", t.name, "' of dim ", t.dim,
                                                     " and init scale ", t.init_scale));
    }
  }
  absl::MutexLock lock(&mu_);
  if (shutdown_) return absl::UnavailableError("shard is shutting down");
  if (initialized_) {
    if (fingerprint != fingerprint_) {
      return absl::FailedPreconditionError(absl::StrCat("shard already holds layout ", fingerprint_,
                                                        "; Init names layout ", fingerprint));
    }
    return InitResult{true, version_};
  }
  used_ = true;
  fingerprint_ = fingerprint;
  range_ = range;
  values_.Assign({values.begin(), values.end()});
  optimizer_ = std::make_unique<Optimizer>(options_.optimizer, range.size());
  optimizer_->set_decay_updates(decay_updates_);
  round_sum_.assign(range.size(), 0.0f);
  tables_.clear();
  for (const SparseTableSpec& t : tables) {
    tables_.push_back(
        std::make_unique<SparseTable>(t, options_.sparse_optimizer, options_.sparse_memory));
  }
  initialized_ = true;
  return InitResult{false, version_};
}

absl::Status Shard::ValidateAccess(int rank, uint64_t fingerprint, KeyRange range, size_t length,
                                   Access access) const {
  if (shutdown_) return absl::UnavailableError("shard is shutting down");
  if (!initialized_) return absl::FailedPreconditionError("shard is not initialised; call Init");
  if (fingerprint != fingerprint_) {
    return absl::FailedPreconditionError(absl::StrCat("layout fingerprint ", fingerprint,
                                                      " differs from the shard's ", fingerprint_));
  }
  const bool part =
      range.begin >= range_.begin && range.end <= range_.end && range.begin < range.end;
  // A pull may read rows alone: an empty range at the slice's start (an observer's read, or a
  // worker's lookup of a step's rows whose dense weights it holds already).
  const bool rows_only =
      access != Access::kPush && range.begin == range_.begin && range.end == range_.begin;
  if (!(range == range_) && !part && !rows_only) {
    return absl::FailedPreconditionError(absl::StrCat("shard owns [", range_.begin, ", ",
                                                      range_.end, "), request names [", range.begin,
                                                      ", ", range.end, ")"));
  }
  if (static_cast<int64_t>(length) != range.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload of ", length, " floats for a range of ", range.size()));
  }
  if (access == Access::kObserve) return absl::OkStatus();
  return CheckLive(rank, absl::StatusCode::kFailedPrecondition);
}

absl::StatusOr<Shard::PushResult> Shard::Push(const PushArgs& args) {
  RETURN_IF_ERROR(CheckRank(args.caller.rank));
  // The payload checks run before taking the lock: they read only the request.
  RETURN_IF_ERROR(args.gradient.CheckShape("gradient"));
  const bool finite = args.gradient.AllFinite();
  std::vector<std::function<void()>> completions;
  absl::StatusOr<PushResult> result;
  {
    absl::MutexLock lock(&mu_);
    result = !initialized_ || args.range == range_ ? PushLocked(args, finite)
                                                   : PushPieceLocked(args, finite);
    if (result.ok()) FinishWaitingPulls(&completions);
  }
  for (auto& complete : completions) complete();  // outside the lock: they reply to callers
  return result;
}

absl::StatusOr<PushAction> Shard::AdmitPushLocked(const PushArgs& args, bool finite) {
  // A call meant for an earlier process of this shard (or from a replaced worker) is ABORTED
  // whatever this process holds, so the worker registers again, even with a shard that restarted
  // without a checkpoint and awaits its Init.
  RETURN_IF_ERROR(CheckIncarnation(args.caller));
  RETURN_IF_ERROR(ValidateAccess(args.caller.rank, args.fingerprint, args.range,
                                 static_cast<size_t>(args.gradient.size()), Access::kPush));
  RETURN_IF_ERROR(ValidateRowsLocked(args.rows, /*with_values=*/true));
  if (!finite || !RowsFinite(args.rows)) {
    ++rejected_nonfinite_;
    return absl::InvalidArgumentError(absl::StrCat("gradient of worker ", args.caller.rank,
                                                   " clock ", args.clock, " contains NaN or Inf"));
  }
  if (args.base_version < 0 || args.base_version > version_) {
    return absl::InvalidArgumentError(
        absl::StrCat("base_version ", args.base_version, " is not in [0, ", version_, "]"));
  }
  ASSIGN_OR_RETURN(const PushAction action, controller_.ClassifyPush(args.caller.rank, args.clock));
  if (action != PushAction::kDuplicate) {  // a retry of an acknowledged push is answered as such
    RETURN_IF_ERROR(CheckPushedKeysLocked(args.caller.rank, args.clock, args.rows));
  }
  RenewLease(args.caller.rank);
  return action;
}

absl::StatusOr<Shard::PushResult> Shard::PushPieceLocked(const PushArgs& args, bool finite) {
  if (!args.rows.empty()) {
    return absl::InvalidArgumentError("sparse rows travel with a whole push, not with a piece");
  }
  ASSIGN_OR_RETURN(const PushAction action, AdmitPushLocked(args, finite));
  PushResult result;
  if (action == PushAction::kDuplicate) {  // the whole clock is done already
    ++pushes_duplicate_;
    result.duplicate = true;
    result.version = version_;
    return result;
  }
  const int rank = args.caller.rank;
  StagedPush& staged = staged_[rank];
  if (staged.clock != args.clock) {  // pieces of an older clock were all superseded by it
    staged.clock = args.clock;
    staged.base_version = args.base_version;
    staged.covered = 0;
    staged.parts.clear();
    // BSP: the worker's round buffer holds nothing between its rounds (its pieces of clock c
    // come after its pull of c, which waited for round c-1 to be applied), so the pieces are
    // gathered there and pushing in pieces costs no slice more than pushing whole.
    staged.in_round_buffer =
        options_.consistency.mode == ConsistencyMode::kBsp && !round_has_gradient_[rank];
    StagedGradient(rank).resize(range_.size());
  }
  // The piece starting at or after args.range.begin, and the one before it, are the only ones
  // that could overlap it.
  auto next = staged.parts.lower_bound(args.range.begin);
  if (next != staged.parts.end() && next->first == args.range.begin &&
      next->second == args.range.end) {
    ++pushes_duplicate_;
    result.duplicate = true;
    result.staged = true;
    result.version = version_;
    return result;
  }
  const bool overlaps_next = next != staged.parts.end() && next->first < args.range.end;
  const bool overlaps_previous =
      next != staged.parts.begin() && std::prev(next)->second > args.range.begin;
  if (overlaps_next || overlaps_previous) {
    const auto other = overlaps_next ? *next : *std::prev(next);
    return absl::InvalidArgumentError(absl::StrCat(
        "piece [", args.range.begin, ", ", args.range.end, ") of clock ", args.clock,
        " overlaps the piece [", other.first, ", ", other.second, ") received before"));
  }
  std::vector<float>& gradient = StagedGradient(rank);
  args.gradient.DecodeInto(
      absl::MakeSpan(gradient).subspan(args.range.begin - range_.begin, args.range.size()));
  staged.parts.emplace(args.range.begin, args.range.end);
  ++pieces_received_;
  staged.covered += args.range.size();
  staged.base_version = std::min(staged.base_version, args.base_version);
  if (staged.covered < range_.size()) {
    result.staged = true;
    result.version = version_;
    return result;
  }
  // Complete: the clock goes through the same path as a whole push.
  PushArgs whole;
  whole.caller = args.caller;
  whole.fingerprint = args.fingerprint;
  whole.range = range_;
  whole.clock = args.clock;
  whole.base_version = staged.base_version;
  whole.gradient = EncodedTensor::OfFloats(gradient);
  staged.clock = -1;
  // The completing piece was admitted just now, under this lock, for the same rank and clock;
  // the pieces' base versions were each checked, so their minimum is valid too.
  return ActOnPushLocked(whole, action);
}

absl::StatusOr<Shard::PushResult> Shard::PushLocked(const PushArgs& args, bool finite) {
  ASSIGN_OR_RETURN(const PushAction action, AdmitPushLocked(args, finite));
  return ActOnPushLocked(args, action);
}

Shard::PushResult Shard::ActOnPushLocked(const PushArgs& args, PushAction action) {
  PushResult result;
  ++(action == PushAction::kDuplicate ? pushes_duplicate_ : pushes_accepted_);
  switch (action) {
    case PushAction::kDuplicate:
      result.duplicate = true;
      break;
    case PushAction::kApply:
      controller_.RecordPush(args.caller.rank);
      result.staleness = version_ - args.base_version;
      result.applied =
          ApplyStale(args.caller.rank, args.clock, args.base_version, args.gradient, args.rows);
      result.dropped = !result.applied;
      break;
    case PushAction::kLate:
      controller_.RecordPush(args.caller.rank);
      ++late_[args.caller.rank];
      result.late = true;
      break;
    case PushAction::kBuffer: {
      controller_.RecordPush(args.caller.rank);
      // The push that completes the round is read straight from its payload: applied as it is
      // when it is the round's only gradient, summed from when it is one float32 piece (a shared
      // region's area, most received messages); one pass over the slice fewer either way. Any
      // other is buffered for the round.
      const bool completes = initialized_ && controller_.RoundReady();
      const bool read_in_place = completes && (AloneInRoundLocked(args.caller.rank) ||
                                               ContiguousFloats(args.gradient) != nullptr);
      std::vector<float>& buffer = round_gradients_[args.caller.rank];
      const bool in_buffer =  // pieces gathered in the round buffer (PushPieceLocked)
          !buffer.empty() && ContiguousFloats(args.gradient) == buffer.data();
      if (!read_in_place && !in_buffer) {
        buffer.resize(args.gradient.size());
        args.gradient.DecodeInto(absl::MakeSpan(buffer));
      }
      round_base_versions_[args.caller.rank] = args.base_version;
      round_has_gradient_[args.caller.rank] = true;
      if (!args.rows.empty()) {
        const absl::Time rows_start = absl::Now();
        round_rows_[args.caller.rank] = args.rows;
        ++sparse_timing_.pushes;
        sparse_timing_.push_seconds += absl::ToDoubleSeconds(absl::Now() - rows_start);
      } else {
        round_rows_[args.caller.rank].clear();
      }
      const int64_t before = version_;
      MaybeApplyRound(args.caller.rank, read_in_place ? &args.gradient : nullptr);
      result.applied = version_ != before;
      result.buffered = !result.applied;
      break;
    }
  }
  result.version = version_;
  return result;
}

void Shard::ApplyGradient(const EncodedTensor& gradient, float lr_scale) {
  if (gradient.dense()) {
    optimizer_->Apply(version_, gradient, values_.Mutable(), lr_scale);
  } else {
    dense_scratch_.resize(values_.size());
    gradient.DecodeInto(absl::MakeSpan(dense_scratch_));
    optimizer_->Apply(version_, absl::MakeConstSpan(dense_scratch_), values_.Mutable(), lr_scale);
  }
  ++version_;
  // BSP snapshots wait for the round's bookkeeping (MaybeApplyRound calls MaybeSnapshot).
  if (options_.consistency.mode != ConsistencyMode::kBsp) MaybeSnapshot();
}

void Shard::MaybeSnapshot() {
  const int64_t every = options_.snapshot_every_updates;
  if (every <= 0 || !options_.on_snapshot || version_ % every != 0) return;
  options_.on_snapshot(ChainSnapshotLocked());
}

bool Shard::ApplyStale(int rank, int64_t clock, int64_t base_version, const EncodedTensor& gradient,
                       const std::vector<SparseRows>& rows) {
  const int64_t staleness = version_ - base_version;
  if (options_.on_apply && !(options_.update_rule.rule == UpdateRule::kDropStale &&
                             staleness > options_.update_rule.drop_above)) {
    options_.on_apply(AppliedUpdate{version_, rank, clock, base_version, staleness});
  }
  const UpdateRuleOptions& rule = options_.update_rule;
  switch (rule.rule) {
    case UpdateRule::kPlain:
      break;
    case UpdateRule::kStalenessLr:
      staleness_[rank].Record(staleness);
      // Rows first: a snapshot taken as the dense update completes the version holds them.
      ApplyRowsLocked(rows, 1.0f / static_cast<float>(staleness + 1));
      ApplyGradient(gradient, 1.0f / static_cast<float>(staleness + 1));
      return true;
    case UpdateRule::kDcAsgd: {
      const std::vector<float>& backup = pulled_values_[rank];
      if (backup.size() != values_.size()) break;  // never pulled: nothing to compensate against
      compensated_.resize(values_.size());
      gradient.DecodeInto(absl::MakeSpan(compensated_));
      DelayCompensate(rule.dc_lambda, compensated_, values_.view(), backup,
                      absl::MakeSpan(compensated_));
      staleness_[rank].Record(staleness);
      ApplyRowsLocked(rows);  // rows are not compensated: no copy of them is kept per worker
      ApplyGradient(EncodedTensor::OfFloats(compensated_));
      return true;
    }
    case UpdateRule::kDropStale:
      if (staleness > rule.drop_above) {
        ++dropped_[rank];
        return false;
      }
      break;
  }
  staleness_[rank].Record(staleness);
  ApplyRowsLocked(rows);
  ApplyGradient(gradient);
  return true;
}

bool Shard::AloneInRoundLocked(int rank) const {
  for (size_t r = 0; r < round_has_gradient_.size(); ++r) {
    if (static_cast<int>(r) != rank && round_has_gradient_[r]) return false;
  }
  return true;
}

void Shard::MaybeApplyRound(int completing_rank, const EncodedTensor* completing) {
  if (options_.consistency.mode != ConsistencyMode::kBsp || !initialized_ ||
      !controller_.RoundReady()) {
    return;
  }
  // Sum in rank order so that the result does not depend on arrival order. The first gradient
  // is added to zeros in the same pass that writes it (0 + g, so -0 becomes +0 exactly as a
  // zero-filled sum would make it), and the last one is added and scaled to the mean in one
  // pass: two passes over the slice fewer, the same bits. A round of one gradient is not copied
  // at all: the optimizer reads each element as 0 + g (ApplyElementwise), the same bits again.
  int round_workers = 0;
  for (size_t r = 0; r < round_gradients_.size(); ++r) round_workers += round_has_gradient_[r];
  ApplyRoundRowsLocked(round_workers);
  int contributors = 0;
  const EncodedTensor* only = nullptr;  // the gradient of a round of one
  EncodedTensor only_buffered;
  for (size_t r = 0; r < round_gradients_.size(); ++r) {
    if (!round_has_gradient_[r]) continue;
    const bool in_place = static_cast<int>(r) == completing_rank && completing != nullptr;
    if (round_workers == 1) {
      if (!in_place) only_buffered = EncodedTensor::OfFloats(round_gradients_[r]);
      only = in_place ? completing : &only_buffered;
    } else {
      const float* g = in_place ? ContiguousFloats(*completing) : round_gradients_[r].data();
      const size_t n = round_sum_.size();
      if (contributors == 0) {
        for (size_t i = 0; i < n; ++i) round_sum_[i] = 0.0f + g[i];
      } else if (contributors + 1 < round_workers) {
        for (size_t i = 0; i < n; ++i) round_sum_[i] += g[i];
      } else {  // the last gradient: the mean in the same pass, the same operations in order
        const float inv = 1.0f / static_cast<float>(round_workers);
        for (size_t i = 0; i < n; ++i) round_sum_[i] = (round_sum_[i] + g[i]) * inv;
      }
    }
    staleness_[r].Record(version_ - round_base_versions_[r]);
    round_has_gradient_[r] = false;
    ++contributors;
  }
  // RoundReady() implies some worker pushed this round; an empty round would divide by zero.
  assert(contributors > 0);
  if (contributors == 0) return;
  if (only != nullptr) {
    ApplyGradient(*only);
  } else {
    ApplyGradient(EncodedTensor::OfFloats(round_sum_));
  }
  controller_.CompleteRound();
  MaybeSnapshot();
}

ShardStatus Shard::GetStatus() const {
  absl::MutexLock lock(&mu_);
  ShardStatus s;
  s.shard_id = options_.shard_id;
  s.num_shards = options_.num_shards;
  s.mode = options_.consistency.mode;
  s.staleness_bound = options_.consistency.staleness;
  s.initialized = initialized_;
  s.fingerprint = fingerprint_;
  s.range = range_;
  s.version = version_;
  s.min_clock = controller_.MinClock();
  s.rejected_nonfinite = rejected_nonfinite_;
  s.pushes_accepted = pushes_accepted_;
  s.pushes_duplicate = pushes_duplicate_;
  s.pieces_received = pieces_received_;
  for (const StagedPush& staged : staged_) {
    s.staging_bytes += static_cast<int64_t>(staged.gradient.capacity() * sizeof(float));
  }
  s.restored_version = restored_version_;
  s.finished_at_restore = finished_at_restore_;
  s.finished_job_rerun = rerun_at_version_ == version_;
  s.decay_updates = options_.optimizer.schedule == LrSchedule::kCosine ? decay_updates_ : 0;
  for (int r = 0; r < options_.consistency.num_workers; ++r) {
    WorkerStatusInfo w;
    w.rank = r;
    w.clock = controller_.clock(r);
    w.state = controller_.state(r);
    w.staleness = staleness_[r];
    w.dropped = dropped_[r];
    w.late = late_[r];
    w.plan = plans_[r];
    w.skipped_steps = controller_.skipped(r);
    s.workers.push_back(std::move(w));
  }
  return s;
}

KeyRange Shard::range() const {
  absl::MutexLock lock(&mu_);
  return range_;
}

std::vector<float> Shard::Values() const {
  absl::MutexLock lock(&mu_);
  return values_.values();
}

}  // namespace ps
