// Shard::EncodeSnapshot and Shard::RestoreSnapshot: the shard's state as a checkpoint payload
// (framed and checksummed by common/storage/checkpoint.h). Layout, all little-endian:
//   u32 format (4; 1 to 3 are read too); u32 shard_id, num_shards, num_workers; u8 mode; u32
//   staleness u8 initialized; u64 fingerprint; i64 begin, end, version, rounds, rejected_nonfinite,
//   pushes_accepted, pushes_duplicate
//   floats values, optimizer slot0, slot1
//   per worker: u8 state; i64 clock; u64 incarnation; i64s histogram counts; i64 count, sum,
//   max, dropped, late; (format 2:) i64 planned_steps, samples_per_step, skipped_steps;
//   u8 has_round_gradient; i64 round_base_version; floats round_gradient
//   (format 3:) u32 tables; (format 4:) i64 base_version (-1: a full snapshot; else an
//   incremental one, whose tables hold the rows changed since the full one of that version);
//   per table: i64s name (one per byte), i64 dim, u32 init_scale (float bits), i64s keys,
//   floats values, floats optimizer state, i64s update counts, (format 4:) i64s last updates,
//   i64 tick, i64 admissions, evictions, not_admitted, u16s admission sketch, i64s keys removed;
//   then per worker: u32 entries of its BSP round's rows, each u32 table, i64s keys, floats
//   gradients
// DC-ASGD's per-worker pulled copies are not saved: after a restore, compensation starts again
// from each worker's next pull.

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/storage/checkpoint.h"
#include "server/shard.h"

namespace ps {

namespace {

constexpr uint32_t kSnapshotFormat = 4;
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

void WriteTable(const SparseTable& table, bool changes_only, ByteWriter& w) {
  const std::string& name = table.spec().name;
  w.I64s(std::vector<int64_t>(name.begin(), name.end()));
  w.I64(table.dim());
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &table.spec().init_scale, sizeof(scale_bits));
  w.U32(scale_bits);
  const SparseTable::Contents c = changes_only ? table.ExportChanges() : table.Export();
  w.I64s(AsI64s(c.keys));
  w.Floats(c.values);
  w.Floats(c.state);
  w.I64s(c.updates);
  w.I64s(c.last_update);
  w.I64(c.tick);
  w.I64(c.counters.admissions);
  w.I64(c.counters.evictions);
  w.I64(c.counters.not_admitted);
  w.U16s(c.sketch);
  w.I64s(AsI64s(c.removed));
}

// A table of a snapshot: its declaration and its contents (all rows, or the changes).
struct ReadTableEntry {
  SparseTableSpec spec;
  SparseTable::Contents contents;
};

absl::StatusOr<ReadTableEntry> ReadTable(ByteReader& in, uint32_t format) {
  ReadTableEntry t;
  SparseTableSpec& spec = t.spec;
  ASSIGN_OR_RETURN(std::vector<int64_t> name, in.I64s("table name", 1024));
  for (int64_t c : name) spec.name.push_back(static_cast<char>(c));
  ASSIGN_OR_RETURN(spec.dim, in.I64("table dim"));
  ASSIGN_OR_RETURN(uint32_t scale_bits, in.U32("table init scale"));
  std::memcpy(&spec.init_scale, &scale_bits, sizeof(scale_bits));
  SparseTable::Contents& c = t.contents;
  ASSIGN_OR_RETURN(std::vector<int64_t> keys, in.I64s("table keys", kMaxValues));
  c.keys = AsKeys(keys);
  ASSIGN_OR_RETURN(c.values, in.Floats("table values", kMaxValues));
  ASSIGN_OR_RETURN(c.state, in.Floats("table state", kMaxValues));
  ASSIGN_OR_RETURN(c.updates, in.I64s("table update counts", kMaxValues));
  if (format >= 4) {
    ASSIGN_OR_RETURN(c.last_update, in.I64s("table last updates", kMaxValues));
    ASSIGN_OR_RETURN(c.tick, in.I64("table tick"));
    ASSIGN_OR_RETURN(c.counters.admissions, in.I64("table admissions"));
    ASSIGN_OR_RETURN(c.counters.evictions, in.I64("table evictions"));
    ASSIGN_OR_RETURN(c.counters.not_admitted, in.I64("table gradients not admitted"));
    ASSIGN_OR_RETURN(c.sketch, in.U16s("table admission sketch",
                                       SparseTable::kSketchDepth * SparseTable::kSketchWidth));
    ASSIGN_OR_RETURN(std::vector<int64_t> removed, in.I64s("table keys removed", kMaxValues));
    c.removed = AsKeys(removed);
  } else {
    c.last_update.assign(c.keys.size(), 0);  // format 3 kept no recency: all rows equally old
    c.counters.admissions = static_cast<int64_t>(c.keys.size());
  }
  if (spec.name.empty() || spec.dim < 1 || !(spec.init_scale > 0) || c.tick < 0) {
    return absl::DataLossError("snapshot table header is inconsistent");
  }
  return t;
}

// A table made from a full snapshot's entry.
absl::StatusOr<std::unique_ptr<SparseTable>> MakeTable(ReadTableEntry entry,
                                                       const ShardOptions& options) {
  if (!entry.contents.removed.empty()) {
    return absl::DataLossError("a full snapshot's table lists removed keys");
  }
  auto table =
      std::make_unique<SparseTable>(entry.spec, options.sparse_optimizer, options.sparse_memory);
  absl::Status restored = table->Restore(std::move(entry.contents));
  if (!restored.ok()) {
    // State of another width or more rows than the capacity: the checkpoint was written with
    // another sparse optimizer or --table_capacity.
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

// A worker's round rows, for tables of `dims`.
absl::StatusOr<std::vector<SparseRows>> ReadRows(ByteReader& in, const std::vector<int64_t>& dims) {
  ASSIGN_OR_RETURN(uint32_t n, in.U32("round row entries"));
  if (n > dims.size()) return absl::DataLossError("more round row entries than tables");
  std::vector<SparseRows> rows(n);
  for (SparseRows& entry : rows) {
    ASSIGN_OR_RETURN(uint32_t table, in.U32("round rows table"));
    ASSIGN_OR_RETURN(std::vector<int64_t> keys, in.I64s("round rows keys", kMaxValues));
    ASSIGN_OR_RETURN(entry.values, in.Floats("round rows gradients", kMaxValues));
    entry.keys = AsKeys(keys);
    if (table >= dims.size() ||
        entry.values.size() != entry.keys.size() * static_cast<size_t>(dims[table])) {
      return absl::DataLossError("snapshot round rows are inconsistent");
    }
    entry.table = static_cast<int>(table);
  }
  return rows;
}

}  // namespace

Shard::Snapshot Shard::EncodeSnapshot(SnapshotUse use) {
  absl::MutexLock lock(&mu_);
  if (use == SnapshotUse::kChain) return ChainSnapshotLocked();
  Snapshot snapshot;
  snapshot.version = version_;
  EncodeSnapshotLocked(/*base_version=*/-1, &snapshot.payload);
  return snapshot;
}

void Shard::RestartSnapshotChain() {
  absl::MutexLock lock(&mu_);
  chain_base_version_ = -1;
}

int DropSupersededSnapshots(std::deque<ShardSnapshot>* queue) {
  if (queue->size() < 2) return 0;
  const auto newest_full = std::find_if(queue->rbegin(), queue->rend(), [](const auto& snapshot) {
    return snapshot.base_version < 0;
  });
  std::deque<ShardSnapshot> kept;
  // A full one with a newer (so incremental) one after it: that one's base.
  if (newest_full != queue->rend() && newest_full != queue->rbegin()) {
    kept.push_back(std::move(*newest_full));
  }
  kept.push_back(std::move(queue->back()));
  const int dropped = static_cast<int>(queue->size() - kept.size());
  *queue = std::move(kept);
  return dropped;
}

Shard::Snapshot Shard::ChainSnapshotLocked() {
  Snapshot snapshot;
  snapshot.version = version_;
  const bool full = tables_.empty() || chain_base_version_ < 0 ||
                    chain_increments_ + 1 >= options_.full_snapshot_every;
  if (full) {
    EncodeSnapshotLocked(/*base_version=*/-1, &snapshot.payload);
    for (const auto& table : tables_) table->MarkUnchanged();
    chain_base_version_ = tables_.empty() ? -1 : version_;
    chain_increments_ = 0;
  } else {
    snapshot.base_version = chain_base_version_;
    EncodeSnapshotLocked(chain_base_version_, &snapshot.payload);
    ++chain_increments_;
  }
  return snapshot;
}

void Shard::EncodeSnapshotLocked(int64_t base_version, std::string* out) const {
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
  w.Floats(values_.view());
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
  w.I64(base_version);
  for (const auto& table : tables_) WriteTable(*table, /*changes_only=*/base_version >= 0, w);
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

// A snapshot read and checked, not yet applied to a shard.
struct ParsedSnapshot {
  uint8_t initialized = 0;
  uint64_t fingerprint = 0;
  int64_t begin = 0, end = 0, version = 0, rounds = 0;
  int64_t rejected = 0, accepted = 0, duplicate = 0;
  std::vector<float> values;
  std::unique_ptr<Optimizer> optimizer;
  std::vector<RestoredWorker> workers;
  int64_t base_version = -1;  // >= 0: incremental, its tables' entries are changes
  std::vector<ReadTableEntry> table_entries;
  std::vector<std::unique_ptr<SparseTable>> tables;  // a full snapshot's
  std::vector<std::vector<SparseRows>> round_rows;
};

absl::StatusOr<ParsedSnapshot> ParseSnapshot(absl::string_view payload,
                                             const ShardOptions& options) {
  ByteReader in(payload);
  const int workers = options.consistency.num_workers;
  ParsedSnapshot p;
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
  if (shard_id != static_cast<uint32_t>(options.shard_id) ||
      num_shards != static_cast<uint32_t>(options.num_shards) ||
      num_workers != static_cast<uint32_t>(workers) || mode != ModeCode(options.consistency.mode) ||
      staleness != static_cast<uint32_t>(options.consistency.staleness)) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint is of shard ", shard_id, "/", num_shards, " with ", num_workers,
                     " workers, mode code ", mode, ", staleness ", staleness, "; this shard is ",
                     options.shard_id, "/", options.num_shards, " with ", workers,
                     " workers, mode ", ConsistencyModeName(options.consistency.mode),
                     ", staleness ", options.consistency.staleness));
  }
  ASSIGN_OR_RETURN(p.initialized, in.U8("initialized"));
  ASSIGN_OR_RETURN(p.fingerprint, in.U64("fingerprint"));
  ASSIGN_OR_RETURN(p.begin, in.I64("begin"));
  ASSIGN_OR_RETURN(p.end, in.I64("end"));
  ASSIGN_OR_RETURN(p.version, in.I64("version"));
  ASSIGN_OR_RETURN(p.rounds, in.I64("rounds"));
  ASSIGN_OR_RETURN(p.rejected, in.I64("rejected_nonfinite"));
  ASSIGN_OR_RETURN(p.accepted, in.I64("pushes_accepted"));
  ASSIGN_OR_RETURN(p.duplicate, in.I64("pushes_duplicate"));
  ASSIGN_OR_RETURN(p.values, in.Floats("values", kMaxValues));
  ASSIGN_OR_RETURN(std::vector<float> slot0, in.Floats("slot0", kMaxValues));
  ASSIGN_OR_RETURN(std::vector<float> slot1, in.Floats("slot1", kMaxValues));
  if (p.initialized > 1 || p.begin < 0 || p.end < p.begin || p.version < 0 || p.rounds < 0 ||
      p.rejected < 0 || p.accepted < 0 || p.duplicate < 0 ||
      static_cast<int64_t>(p.values.size()) != (p.initialized ? p.end - p.begin : 0)) {
    return absl::DataLossError("snapshot header is inconsistent");
  }
  if (p.initialized) {
    p.optimizer = std::make_unique<Optimizer>(options.optimizer, p.end - p.begin);
    absl::Status s = p.optimizer->RestoreSlots(std::move(slot0), std::move(slot1));
    if (!s.ok()) return absl::FailedPreconditionError(s.message());
  }
  p.workers.resize(workers);
  for (int r = 0; r < workers; ++r) {
    ASSIGN_OR_RETURN(p.workers[r], ReadWorker(in, format, p.values.size(), r));
  }
  p.round_rows.resize(workers);
  if (format >= 3) {
    ASSIGN_OR_RETURN(uint32_t table_count, in.U32("tables"));
    if (table_count > 1024) return absl::DataLossError("snapshot declares too many tables");
    if (format >= 4) {
      ASSIGN_OR_RETURN(p.base_version, in.I64("base version"));
      if (p.base_version < -1 || p.base_version > p.version) {
        return absl::DataLossError("snapshot base version is inconsistent");
      }
    }
    for (uint32_t t = 0; t < table_count; ++t) {
      ASSIGN_OR_RETURN(ReadTableEntry entry, ReadTable(in, format));
      if (p.base_version < 0) {
        ASSIGN_OR_RETURN(std::unique_ptr<SparseTable> table, MakeTable(std::move(entry), options));
        p.tables.push_back(std::move(table));
      } else {
        p.table_entries.push_back(std::move(entry));
      }
    }
    // The round's rows are checked against the tables' declarations (dims).
    std::vector<int64_t> dims;
    for (const auto& table : p.tables) dims.push_back(table->dim());
    for (const auto& entry : p.table_entries) dims.push_back(entry.spec.dim);
    for (int r = 0; r < workers; ++r) {
      ASSIGN_OR_RETURN(p.round_rows[r], ReadRows(in, dims));
    }
  }
  if (in.remaining() != 0) {
    return absl::DataLossError(absl::StrCat("snapshot has ", in.remaining(), " trailing bytes"));
  }
  return p;
}

// Lays an incremental snapshot's table changes over its base (a full snapshot of the same shard
// and model): the result's tables are the base's with the changes.
absl::Status ApplyIncrement(ParsedSnapshot base, ParsedSnapshot* increment) {
  if (base.base_version >= 0 || base.version != increment->base_version ||
      base.tables.size() != increment->table_entries.size() ||
      base.fingerprint != increment->fingerprint) {
    return absl::DataLossError(absl::StrCat("the base of an incremental snapshot of version ",
                                            increment->version, " is not the full one of version ",
                                            increment->base_version, " of this model"));
  }
  for (size_t t = 0; t < base.tables.size(); ++t) {
    ReadTableEntry& entry = increment->table_entries[t];
    const SparseTableSpec& spec = base.tables[t]->spec();
    if (spec.name != entry.spec.name || spec.dim != entry.spec.dim) {
      return absl::DataLossError(
          absl::StrCat("incremental snapshot's table ", t, " is not its base's '", spec.name, "'"));
    }
    absl::Status applied = base.tables[t]->ApplyChanges(std::move(entry.contents));
    if (!applied.ok()) return absl::DataLossError(applied.message());
  }
  increment->tables = std::move(base.tables);
  increment->table_entries.clear();
  return absl::OkStatus();
}

}  // namespace

absl::Status Shard::RestoreSnapshot(absl::string_view payload, const BaseLoader& load_base) {
  const int workers = options_.consistency.num_workers;
  ASSIGN_OR_RETURN(ParsedSnapshot p, ParseSnapshot(payload, options_));
  if (p.base_version >= 0) {
    if (!load_base) {
      return absl::NotFoundError(absl::StrCat("an incremental snapshot needs the full one of ",
                                              "version ", p.base_version));
    }
    absl::StatusOr<std::string> base_payload = load_base(p.base_version);
    if (!base_payload.ok()) {
      return absl::NotFoundError(
          absl::StrCat("the base of an incremental snapshot: ", base_payload.status().message()));
    }
    ASSIGN_OR_RETURN(ParsedSnapshot base, ParseSnapshot(*base_payload, options_));
    RETURN_IF_ERROR(ApplyIncrement(std::move(base), &p));
  }

  absl::MutexLock lock(&mu_);
  if (used_ || shutdown_) {
    return absl::FailedPreconditionError("a shard in use cannot restore a checkpoint");
  }
  initialized_ = p.initialized == 1;
  fingerprint_ = p.fingerprint;
  range_ = KeyRange{p.begin, p.end};
  values_.Assign(std::move(p.values));
  optimizer_ = std::move(p.optimizer);
  tables_ = std::move(p.tables);
  round_rows_ = std::move(p.round_rows);
  round_sum_.assign(values_.size(), 0.0f);
  version_ = p.version;
  rejected_nonfinite_ = p.rejected;
  pushes_accepted_ = p.accepted;
  pushes_duplicate_ = p.duplicate;
  chain_base_version_ = -1;  // the next chain snapshot is a full one of this process
  controller_.RestoreRounds(p.rounds);
  const absl::Time now = absl::Now();
  for (int r = 0; r < workers; ++r) {
    RestoredWorker& w = p.workers[r];
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
  restored_version_ = p.version;
  finished_at_restore_ = JobFinished();
  used_ = true;
  lease_changed_ = true;
  return absl::OkStatus();
}

}  // namespace ps
