// Shard::EncodeSnapshot and Shard::RestoreSnapshot: the shard's state as a checkpoint payload
// (framed and checksummed by common/storage/checkpoint.h). Layout, all little-endian:
//   u32 format (2; 1 is read too); u32 shard_id, num_shards, num_workers; u8 mode; u32 staleness
//   u8 initialized; u64 fingerprint; i64 begin, end, version, rounds, rejected_nonfinite,
//   pushes_accepted, pushes_duplicate
//   floats values, optimizer slot0, slot1
//   per worker: u8 state; i64 clock; u64 incarnation; i64s histogram counts; i64 count, sum,
//   max, dropped, late; (format 2:) i64 planned_steps, samples_per_step, skipped_steps;
//   u8 has_round_gradient; i64 round_base_version; floats round_gradient
//   (format 3:) u32 tables; per table: i64s name (one per byte), i64 dim, u32 init_scale (float
//   bits), i64s keys, floats values, floats optimizer state, i64s update counts; then per worker:
//   u32 entries of its BSP round's rows, each u32 table, i64s keys, floats gradients
// DC-ASGD's per-worker pulled copies are not saved: after a restore, compensation starts again
// from each worker's next pull.

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/storage/checkpoint.h"
#include "server/shard.h"

namespace ps {

namespace {

constexpr uint32_t kSnapshotFormat = 3;
// Format 1 lacks the work accounting: its workers restore with no plan and nothing skipped.
constexpr uint32_t kOldestSnapshotFormat = 1;
// Bounds for lengths read from a snapshot, so a corrupt one cannot ask for absurd allocations.
constexpr uint64_t kMaxValues = uint64_t{1} << 34;

uint8_t ModeCode(ConsistencyMode m) { return static_cast<uint8_t>(m); }

std::vector<int64_t> AsI64s(const std::vector<uint64_t>& keys) {
  return std::vector<int64_t>(keys.begin(), keys.end());
}
std::vector<uint64_t> AsKeys(const std::vector<int64_t>& v) {
  return std::vector<uint64_t>(v.begin(), v.end());
}

void WriteTable(const SparseTable& table, ByteWriter& w) {
  const std::string& name = table.spec().name;
  w.I64s(std::vector<int64_t>(name.begin(), name.end()));
  w.I64(table.dim());
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &table.spec().init_scale, sizeof(scale_bits));
  w.U32(scale_bits);
  SparseTable::Contents c = table.Export();
  w.I64s(AsI64s(c.keys));
  w.Floats(c.values);
  w.Floats(c.state);
  w.I64s(c.updates);
}

absl::StatusOr<std::unique_ptr<SparseTable>> ReadTable(ByteReader& in,
                                                       const SparseOptimizerOptions& optimizer) {
  SparseTableSpec spec;
  ASSIGN_OR_RETURN(std::vector<int64_t> name, in.I64s("table name", 1024));
  for (int64_t c : name) spec.name.push_back(static_cast<char>(c));
  ASSIGN_OR_RETURN(spec.dim, in.I64("table dim"));
  ASSIGN_OR_RETURN(uint32_t scale_bits, in.U32("table init scale"));
  std::memcpy(&spec.init_scale, &scale_bits, sizeof(scale_bits));
  SparseTable::Contents c;
  ASSIGN_OR_RETURN(std::vector<int64_t> keys, in.I64s("table keys", kMaxValues));
  c.keys = AsKeys(keys);
  ASSIGN_OR_RETURN(c.values, in.Floats("table values", kMaxValues));
  ASSIGN_OR_RETURN(c.state, in.Floats("table state", kMaxValues));
  ASSIGN_OR_RETURN(c.updates, in.I64s("table update counts", kMaxValues));
  if (spec.name.empty() || spec.dim < 1 || !(spec.init_scale > 0)) {
    return absl::DataLossError("snapshot table header is inconsistent");
  }
  auto table = std::make_unique<SparseTable>(spec, optimizer);
  absl::Status restored = table->Restore(std::move(c));
  if (!restored.ok()) {
    // A state of another width: the checkpoint was written with another sparse optimizer.
    return absl::FailedPreconditionError(restored.message());
  }
  return table;
}

void WriteRows(const std::vector<SparseRows>& rows, ByteWriter& w) {
  w.U32(static_cast<uint32_t>(rows.size()));
  for (const SparseRows& entry : rows) {
    w.U32(static_cast<uint32_t>(entry.table));
    w.I64s(AsI64s(entry.keys));
    w.Floats(entry.values);
  }
}

absl::StatusOr<std::vector<SparseRows>> ReadRows(
    ByteReader& in, const std::vector<std::unique_ptr<SparseTable>>& tables) {
  ASSIGN_OR_RETURN(uint32_t n, in.U32("round row entries"));
  if (n > tables.size()) return absl::DataLossError("more round row entries than tables");
  std::vector<SparseRows> rows(n);
  for (SparseRows& entry : rows) {
    ASSIGN_OR_RETURN(uint32_t table, in.U32("round rows table"));
    ASSIGN_OR_RETURN(std::vector<int64_t> keys, in.I64s("round rows keys", kMaxValues));
    ASSIGN_OR_RETURN(entry.values, in.Floats("round rows gradients", kMaxValues));
    entry.keys = AsKeys(keys);
    if (table >= tables.size() ||
        entry.values.size() != entry.keys.size() * static_cast<size_t>(tables[table]->dim())) {
      return absl::DataLossError("snapshot round rows are inconsistent");
    }
    entry.table = static_cast<int>(table);
  }
  return rows;
}

}  // namespace

Shard::Snapshot Shard::EncodeSnapshot() const {
  absl::MutexLock lock(&mu_);
  Snapshot snapshot;
  snapshot.version = version_;
  EncodeSnapshotLocked(&snapshot.payload);
  return snapshot;
}

void Shard::EncodeSnapshotLocked(std::string* out) const {
  ByteWriter w;
  const int workers = options_.consistency.num_workers;
  w.U32(kSnapshotFormat);
  w.U32(static_cast<uint32_t>(options_.shard_id));
  w.U32(static_cast<uint32_t>(options_.num_shards));
  w.U32(static_cast<uint32_t>(workers));
  w.U8(ModeCode(options_.consistency.mode));
  w.U32(static_cast<uint32_t>(options_.consistency.staleness));
  w.U8(initialized_ ? 1 : 0);
  w.U64(fingerprint_);
  w.I64(range_.begin);
  w.I64(range_.end);
  w.I64(version_);
  w.I64(controller_.rounds());
  w.I64(rejected_nonfinite_);
  w.I64(pushes_accepted_);
  w.I64(pushes_duplicate_);
  w.Floats(values_);
  w.Floats(optimizer_ != nullptr ? optimizer_->slot0() : absl::Span<const float>());
  w.Floats(optimizer_ != nullptr ? optimizer_->slot1() : absl::Span<const float>());
  for (int r = 0; r < workers; ++r) {
    w.U8(static_cast<uint8_t>(controller_.state(r)));
    w.I64(controller_.clock(r));
    w.U64(incarnations_[r]);
    w.I64s(staleness_[r].counts());
    w.I64(staleness_[r].count());
    w.I64(staleness_[r].sum());
    w.I64(staleness_[r].max());
    w.I64(dropped_[r]);
    w.I64(late_[r]);
    w.I64(plans_[r].steps);
    w.I64(plans_[r].samples_per_step);
    w.I64(controller_.skipped(r));
    w.U8(round_has_gradient_[r] ? 1 : 0);
    w.I64(round_base_versions_[r]);
    w.Floats(round_has_gradient_[r] ? absl::MakeConstSpan(round_gradients_[r])
                                    : absl::Span<const float>());
  }
  w.U32(static_cast<uint32_t>(tables_.size()));
  for (const auto& table : tables_) WriteTable(*table, w);
  for (int r = 0; r < workers; ++r) {
    WriteRows(round_has_gradient_[r] ? round_rows_[r] : std::vector<SparseRows>(), w);
  }
  *out = w.Release();
}

namespace {

// One worker's entry of a snapshot.
struct RestoredWorker {
  WorkerState state = WorkerState::kPending;
  int64_t clock = 0;
  uint64_t incarnation = 0;
  StalenessHistogram histogram;
  int64_t dropped = 0, late = 0;
  WorkPlan plan;
  int64_t skipped = 0;
  bool has_gradient = false;
  int64_t base_version = 0;
  std::vector<float> gradient;
};

// Reads worker `r`'s entry (a snapshot of `format` over a slice of `values` elements).
absl::StatusOr<RestoredWorker> ReadWorker(ByteReader& in, uint32_t format, size_t values, int r) {
  RestoredWorker w;
  ASSIGN_OR_RETURN(uint8_t state, in.U8("worker state"));
  ASSIGN_OR_RETURN(w.clock, in.I64("worker clock"));
  ASSIGN_OR_RETURN(w.incarnation, in.U64("worker incarnation"));
  ASSIGN_OR_RETURN(std::vector<int64_t> counts,
                   in.I64s("staleness counts", StalenessHistogram::kBuckets));
  ASSIGN_OR_RETURN(int64_t count, in.I64("staleness count"));
  ASSIGN_OR_RETURN(int64_t sum, in.I64("staleness sum"));
  ASSIGN_OR_RETURN(int64_t max, in.I64("staleness max"));
  ASSIGN_OR_RETURN(w.dropped, in.I64("dropped"));
  ASSIGN_OR_RETURN(w.late, in.I64("late"));
  if (format >= 2) {
    ASSIGN_OR_RETURN(w.plan.steps, in.I64("planned steps"));
    ASSIGN_OR_RETURN(w.plan.samples_per_step, in.I64("samples per step"));
    ASSIGN_OR_RETURN(w.skipped, in.I64("skipped steps"));
  }
  ASSIGN_OR_RETURN(uint8_t has_gradient, in.U8("round flag"));
  ASSIGN_OR_RETURN(w.base_version, in.I64("round base version"));
  ASSIGN_OR_RETURN(w.gradient, in.Floats("round gradient", kMaxValues));
  if (state > static_cast<uint8_t>(WorkerState::kExpired) || w.clock < 0 || has_gradient > 1 ||
      w.dropped < 0 || w.late < 0 || w.plan.steps < 0 || w.plan.samples_per_step < 0 ||
      w.skipped < 0 || w.skipped > w.clock ||
      !w.histogram.Restore(std::move(counts), count, sum, max) ||
      w.gradient.size() != (has_gradient ? values : 0)) {
    return absl::DataLossError(absl::StrCat("snapshot entry of worker ", r, " is inconsistent"));
  }
  w.state = static_cast<WorkerState>(state);
  w.has_gradient = has_gradient == 1;
  return w;
}

}  // namespace

absl::Status Shard::RestoreSnapshot(absl::string_view payload) {
  ByteReader in(payload);
  const int workers = options_.consistency.num_workers;
  ASSIGN_OR_RETURN(uint32_t format, in.U32("format"));
  if (format < kOldestSnapshotFormat || format > kSnapshotFormat) {
    return absl::DataLossError(absl::StrCat("snapshot format ", format, " is not in [",
                                            kOldestSnapshotFormat, ", ", kSnapshotFormat, "]"));
  }
  ASSIGN_OR_RETURN(uint32_t shard_id, in.U32("shard_id"));
  ASSIGN_OR_RETURN(uint32_t num_shards, in.U32("num_shards"));
  ASSIGN_OR_RETURN(uint32_t num_workers, in.U32("num_workers"));
  ASSIGN_OR_RETURN(uint8_t mode, in.U8("mode"));
  ASSIGN_OR_RETURN(uint32_t staleness, in.U32("staleness"));
  if (shard_id != static_cast<uint32_t>(options_.shard_id) ||
      num_shards != static_cast<uint32_t>(options_.num_shards) ||
      num_workers != static_cast<uint32_t>(workers) ||
      mode != ModeCode(options_.consistency.mode) ||
      staleness != static_cast<uint32_t>(options_.consistency.staleness)) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint is of shard ", shard_id, "/", num_shards, " with ", num_workers,
                     " workers, mode code ", mode, ", staleness ", staleness, "; this shard is ",
                     options_.shard_id, "/", options_.num_shards, " with ", workers,
                     " workers, mode ", ConsistencyModeName(options_.consistency.mode),
                     ", staleness ", options_.consistency.staleness));
  }
  ASSIGN_OR_RETURN(uint8_t initialized, in.U8("initialized"));
  ASSIGN_OR_RETURN(uint64_t fingerprint, in.U64("fingerprint"));
  ASSIGN_OR_RETURN(int64_t begin, in.I64("begin"));
  ASSIGN_OR_RETURN(int64_t end, in.I64("end"));
  ASSIGN_OR_RETURN(int64_t version, in.I64("version"));
  ASSIGN_OR_RETURN(int64_t rounds, in.I64("rounds"));
  ASSIGN_OR_RETURN(int64_t rejected, in.I64("rejected_nonfinite"));
  ASSIGN_OR_RETURN(int64_t accepted, in.I64("pushes_accepted"));
  ASSIGN_OR_RETURN(int64_t duplicate, in.I64("pushes_duplicate"));
  ASSIGN_OR_RETURN(std::vector<float> values, in.Floats("values", kMaxValues));
  ASSIGN_OR_RETURN(std::vector<float> slot0, in.Floats("slot0", kMaxValues));
  ASSIGN_OR_RETURN(std::vector<float> slot1, in.Floats("slot1", kMaxValues));
  if (initialized > 1 || begin < 0 || end < begin || version < 0 || rounds < 0 || rejected < 0 ||
      accepted < 0 || duplicate < 0 ||
      static_cast<int64_t>(values.size()) != (initialized ? end - begin : 0)) {
    return absl::DataLossError("snapshot header is inconsistent");
  }
  std::unique_ptr<Optimizer> optimizer;
  if (initialized) {
    optimizer = std::make_unique<Optimizer>(options_.optimizer, end - begin);
    absl::Status s = optimizer->RestoreSlots(std::move(slot0), std::move(slot1));
    if (!s.ok()) return absl::FailedPreconditionError(s.message());
  }
  std::vector<RestoredWorker> restored(workers);
  for (int r = 0; r < workers; ++r) {
    ASSIGN_OR_RETURN(restored[r], ReadWorker(in, format, values.size(), r));
  }
  std::vector<std::unique_ptr<SparseTable>> tables;
  std::vector<std::vector<SparseRows>> round_rows(workers);
  if (format >= 3) {
    ASSIGN_OR_RETURN(uint32_t table_count, in.U32("tables"));
    if (table_count > 1024) return absl::DataLossError("snapshot declares too many tables");
    for (uint32_t t = 0; t < table_count; ++t) {
      ASSIGN_OR_RETURN(std::unique_ptr<SparseTable> table,
                       ReadTable(in, options_.sparse_optimizer));
      tables.push_back(std::move(table));
    }
    for (int r = 0; r < workers; ++r) {
      ASSIGN_OR_RETURN(round_rows[r], ReadRows(in, tables));
    }
  }
  if (in.remaining() != 0) {
    return absl::DataLossError(absl::StrCat("snapshot has ", in.remaining(), " trailing bytes"));
  }

  absl::MutexLock lock(&mu_);
  if (used_ || shutdown_) {
    return absl::FailedPreconditionError("a shard in use cannot restore a checkpoint");
  }
  initialized_ = initialized == 1;
  fingerprint_ = fingerprint;
  range_ = KeyRange{begin, end};
  values_ = std::move(values);
  optimizer_ = std::move(optimizer);
  tables_ = std::move(tables);
  round_rows_ = std::move(round_rows);
  round_sum_.assign(values_.size(), 0.0f);
  version_ = version;
  rejected_nonfinite_ = rejected;
  pushes_accepted_ = accepted;
  pushes_duplicate_ = duplicate;
  controller_.RestoreRounds(rounds);
  const absl::Time now = absl::Now();
  for (int r = 0; r < workers; ++r) {
    RestoredWorker& w = restored[r];
    controller_.RestoreWorker(r, w.state, w.clock, w.skipped);
    RecordPlan(r, w.plan);
    incarnations_[r] = w.incarnation;
    staleness_[r] = std::move(w.histogram);
    dropped_[r] = w.dropped;
    late_[r] = w.late;
    round_has_gradient_[r] = w.has_gradient;
    round_base_versions_[r] = w.base_version;
    round_gradients_[r] = std::move(w.gradient);
    // A worker that was live gets time to come back before it leaves the barrier set: all of
    // them must register again with this new process, after their retries' backoff and a new
    // connection (kRestoreGrace); BSP would otherwise go on without the late ones, and their
    // steps since the checkpoint would be skipped.
    if (w.state == WorkerState::kLive) {
      lease_deadline_[r] = now + std::max(options_.lease, kRestoreGrace);
    }
  }
  restored_version_ = version;
  finished_at_restore_ = JobFinished();
  used_ = true;
  lease_changed_ = true;
  return absl::OkStatus();
}

}  // namespace ps
