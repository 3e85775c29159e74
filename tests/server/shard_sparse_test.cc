// A shard's sparse tables: rows pulled with the slice, pushed rows applied at once (SSP/ASP) or
// as the BSP round's mean in rank order, every bad request refused with its code and nothing
// changed, and the rows in snapshots.

#include <algorithm>
#include <deque>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "server/shard.h"
#include "tests/support/test_shards.h"

namespace ps {
namespace {

constexpr uint64_t kFp = 0xbeef;
const SparseTableSpec kTable{"embeddings", 2, 0.05f};
// The zero dense gradients of the pushes: an EncodedTensor borrows its floats, so they must
// outlive the push.
const std::vector<float> kZeros(4, 0.0f);

std::unique_ptr<Shard> MakeShard(ConsistencyMode mode, int workers, int shard_id = 0,
                                 int num_shards = 1) {
  ShardOptions o = SgdShard(mode, workers, shard_id, num_shards);
  o.sparse_optimizer = {SparseOptimizerKind::kSgd, 1.0f};
  o.lease = absl::Seconds(30);
  auto s = Shard::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  auto shard = std::move(*s);
  const KeyRange range = ShardRange(2, num_shards, shard_id);
  const std::vector<float> init(range.size(), 1.0f);
  EXPECT_TRUE(shard->Init(kFp, 2, range, init, {kTable}).ok());
  for (int r = 0; r < workers; ++r) EXPECT_TRUE(shard->Register(r, kFp).ok());
  return shard;
}

Shard::PushArgs PushOf(int rank, int64_t clock, std::vector<uint64_t> keys,
                       std::vector<float> grads, const Shard& shard) {
  Shard::PushArgs a;
  a.caller.rank = rank;
  a.fingerprint = kFp;
  a.range = shard.range();
  a.clock = clock;
  a.gradient = EncodedTensor::OfFloats(absl::MakeConstSpan(kZeros).subspan(0, a.range.size()));
  a.rows.push_back(SparseRows{0, std::move(keys), std::move(grads)});
  return a;
}

// A pull of `keys` with the slice: worker `rank`'s for `clock` (BSP: a push may carry only the
// rows so pulled), or an observer's (rank < 0). Returns the rows' values.
std::vector<float> PullRows(Shard& shard, int rank, int64_t clock, std::vector<uint64_t> keys) {
  Shard::PullArgs a;
  a.caller.rank = std::max(rank, 0);
  a.no_wait = rank < 0;
  a.fingerprint = kFp;
  a.range = shard.range();
  a.clock = clock;
  a.rows.push_back(SparseRows{0, std::move(keys), {}});
  std::vector<float> slice(a.range.size());
  auto r = shard.Pull(a, absl::Now() + absl::Seconds(5), absl::MakeSpan(slice));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->rows[0] : std::vector<float>();
}

// The current values of `keys` (an observer's read).
std::vector<float> Rows(Shard& shard, std::vector<uint64_t> keys) {
  return PullRows(shard, -1, 0, std::move(keys));
}

void PullAs(Shard& shard, int rank, int64_t clock, std::vector<uint64_t> keys) {
  PullRows(shard, rank, clock, std::move(keys));
}

// A BSP worker's step: its pull of the rows, then its push.
absl::StatusOr<Shard::PushResult> Step(Shard& shard, int rank, int64_t clock,
                                       std::vector<uint64_t> keys, std::vector<float> grads) {
  PullAs(shard, rank, clock, keys);
  return shard.Push(PushOf(rank, clock, std::move(keys), std::move(grads), shard));
}

std::vector<float> Initial(uint64_t key) {
  std::vector<float> row(2);
  SparseTable::InitialRow(kTable, key, row.data());
  return row;
}

TEST(ShardSparse, PullsReadRowsAndAsyncPushesApplyAtOnce) {
  auto shard = MakeShard(ConsistencyMode::kAsp, 2);
  const std::vector<float> w5 = Initial(5), w9 = Initial(9);
  EXPECT_EQ(Rows(*shard, {5, 9}), (std::vector<float>{w5[0], w5[1], w9[0], w9[1]}));
  auto pushed = shard->Push(PushOf(1, 0, {9}, {0.5f, -1.0f}, *shard));
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_TRUE(pushed->applied);
  EXPECT_EQ(Rows(*shard, {9, 5}), (std::vector<float>{w9[0] - 0.5f, w9[1] + 1.0f, w5[0], w5[1]}));
  ASSERT_EQ(shard->TableStatuses().size(), 1u);
  EXPECT_EQ(shard->TableStatuses()[0].rows, 1);  // the pulls created no row
}

TEST(ShardSparse, BspRowsGetTheRoundsMeanWhateverTheArrivalOrder) {
  auto shard = MakeShard(ConsistencyMode::kBsp, 3);
  const std::vector<float> w1 = Initial(1), w2 = Initial(2);
  ASSERT_TRUE(Step(*shard, 2, 0, {1}, {3, 3}).ok());
  ASSERT_TRUE(Step(*shard, 0, 0, {2, 1}, {6, 0, 1, 2}).ok());
  EXPECT_EQ(Rows(*shard, {1}), w1);  // buffered until the round is whole
  auto last = Step(*shard, 1, 0, {2}, {0, 3});
  ASSERT_TRUE(last.ok());
  EXPECT_TRUE(last->applied);
  // Row 1: (1 + 3) / 3 and (2 + 3) / 3; row 2: (6 + 0) / 3, (0 + 3) / 3; the rank order 0, 1, 2.
  const float third = 1.0f / 3.0f;
  EXPECT_EQ(Rows(*shard, {1, 2}),
            (std::vector<float>{w1[0] - (1.0f + 3.0f) * third, w1[1] - (2.0f + 3.0f) * third,
                                w2[0] - (6.0f + 0.0f) * third, w2[1] - (0.0f + 3.0f) * third}));
}

TEST(ShardSparse, BspRefusesAPushOfRowsTheWorkerDidNotPullForThatClock) {
  auto shard = MakeShard(ConsistencyMode::kBsp, 2);
  const std::vector<float> before = Rows(*shard, {3, 5, 9});
  // No pull of rows yet.
  EXPECT_EQ(shard->Push(PushOf(0, 0, {3}, {1, 1}, *shard)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  PullAs(*shard, 0, 0, {3, 5});
  // A key it did not ask for.
  auto stray = shard->Push(PushOf(0, 0, {3, 9}, {1, 1, 1, 1}, *shard));
  EXPECT_EQ(stray.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(stray.status().message().find("key 9"), std::string::npos) << stray.status();
  // Another worker's pull does not count for it.
  PullAs(*shard, 1, 0, {9});
  EXPECT_EQ(shard->Push(PushOf(0, 0, {9}, {1, 1}, *shard)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Rows(*shard, {3, 5, 9}), before);
  EXPECT_EQ(shard->GetStatus().workers[0].clock, 0);  // nothing recorded
  // A subset of what it pulled is fine, and its retry is a duplicate, not a refusal.
  ASSERT_TRUE(shard->Push(PushOf(0, 0, {5}, {1, 1}, *shard)).ok());
  auto retry = shard->Push(PushOf(0, 0, {5}, {1, 1}, *shard));
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_TRUE(retry->duplicate);
  ASSERT_TRUE(shard->Push(PushOf(1, 0, {9}, {1, 1}, *shard)).ok());  // round 0 applied
  // The next clock needs its own pull: the rows of clock 0's pull are not clock 1's.
  EXPECT_EQ(shard->Push(PushOf(0, 1, {5}, {1, 1}, *shard)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // SSP and ASP apply pushes at once and do not check (their rows may be read any time).
  auto async = MakeShard(ConsistencyMode::kAsp, 1);
  EXPECT_TRUE(async->Push(PushOf(0, 0, {3}, {1, 1}, *async)).ok());
}

TEST(ShardSparse, AWorkersRowsOnlyPullsOfOneClockAddUpAndPushesCarryTheirRange) {
  auto shard = MakeShard(ConsistencyMode::kBsp, 1);
  const std::vector<float> before = Rows(*shard, {3, 5});
  // Two lookups of clock 0, rows alone (an empty range at the slice's start), as the Python
  // package's embeddings make them: both sets of keys may go with the push of clock 0.
  for (const uint64_t key : {3, 5}) {
    Shard::PullArgs a;
    a.caller.rank = 0;
    a.fingerprint = kFp;
    a.range = KeyRange{shard->range().begin, shard->range().begin};
    a.clock = 0;
    a.rows.push_back(SparseRows{0, {key}, {}});
    auto pulled = shard->Pull(a, absl::Now() + absl::Seconds(5), absl::Span<float>());
    ASSERT_TRUE(pulled.ok()) << pulled.status();
    ASSERT_EQ(pulled->rows.size(), 1u);
    EXPECT_EQ(pulled->rows[0], Rows(*shard, {key}));
  }
  // A push never names an empty range: with rows it is a piece, which carries none; without,
  // it names no part of the range.
  Shard::PushArgs rows_only = PushOf(0, 0, {3}, {1, 1}, *shard);
  rows_only.range = KeyRange{shard->range().begin, shard->range().begin};
  rows_only.gradient = EncodedTensor::OfFloats({});
  EXPECT_EQ(shard->Push(rows_only).status().code(), absl::StatusCode::kInvalidArgument);
  rows_only.rows.clear();
  EXPECT_EQ(shard->Push(rows_only).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(shard->GetStatus().workers[0].clock, 0);
  ASSERT_TRUE(shard->Push(PushOf(0, 0, {3, 5}, {1, 1, 2, 2}, *shard)).ok());
  const std::vector<float> after = Rows(*shard, {3, 5});
  // Sparse SGD at rate 1: each row moves by its gradient.
  EXPECT_EQ(after,
            (std::vector<float>{before[0] - 1, before[1] - 1, before[2] - 2, before[3] - 2}));
}

TEST(ShardSparse, BadRowsAreRefusedAndChangeNothing) {
  auto shard = MakeShard(ConsistencyMode::kAsp, 1, /*shard_id=*/0, /*num_shards=*/2);
  uint64_t mine = 0, theirs = 0;
  while (ShardOfKey(mine, 2) != 0) ++mine;
  while (ShardOfKey(theirs, 2) != 1) ++theirs;
  const std::vector<float> before = Rows(*shard, {mine});
  auto code = [&](const Shard::PushArgs& a) { return shard->Push(a).status().code(); };
  Shard::PushArgs unknown = PushOf(0, 0, {mine}, {1, 1}, *shard);
  unknown.rows[0].table = 1;
  EXPECT_EQ(code(unknown), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(PushOf(0, 0, {theirs}, {1, 1}, *shard)), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(PushOf(0, 0, {mine, mine}, {1, 1, 1, 1}, *shard)),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(PushOf(0, 0, {mine}, {1, 1, 1}, *shard)), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(PushOf(0, 0, {mine}, {1, std::nanf("")}, *shard)),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard->GetStatus().rejected_nonfinite, 1);
  EXPECT_EQ(shard->GetStatus().version, 0);
  EXPECT_EQ(shard->GetStatus().workers[0].clock, 0);
  EXPECT_EQ(Rows(*shard, {mine}), before);
  Shard::PullArgs pull;
  pull.fingerprint = kFp;
  pull.range = shard->range();
  pull.no_wait = true;
  pull.rows.push_back(SparseRows{0, {theirs}, {}});
  std::vector<float> slice(pull.range.size());
  EXPECT_EQ(
      shard->Pull(pull, absl::Now() + absl::Seconds(1), absl::MakeSpan(slice)).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(ShardSparse, RowsTravelWithWholePushesOnly) {
  ShardOptions o;
  o.consistency.mode = ConsistencyMode::kAsp;
  o.consistency.num_workers = 1;
  auto created = Shard::Create(o);
  ASSERT_TRUE(created.ok());
  Shard& shard = **created;
  ASSERT_TRUE(shard.Init(kFp, 4, KeyRange{0, 4}, std::vector<float>(4, 0.0f), {kTable}).ok());
  ASSERT_TRUE(shard.Register(0, kFp).ok());
  Shard::PushArgs piece;
  piece.fingerprint = kFp;
  piece.range = KeyRange{0, 2};
  piece.gradient = EncodedTensor::OfFloats(absl::MakeConstSpan(kZeros).subspan(0, 2));
  piece.rows.push_back(SparseRows{0, {1}, {1, 1}});
  EXPECT_EQ(shard.Push(piece).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard
                .Init(kFp, 4, KeyRange{0, 4}, std::vector<float>(4, 0.0f),
                      {SparseTableSpec{"bad", 0, 0.1f}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShardSparse, SnapshotsHoldTheRowsAndTheOpenRoundsRows) {
  auto shard = MakeShard(ConsistencyMode::kBsp, 2);
  ASSERT_TRUE(Step(*shard, 0, 0, {4, 7}, {1, 2, 3, 4}).ok());
  ASSERT_TRUE(Step(*shard, 1, 0, {4}, {1, 0}).ok());    // round 0 applied
  ASSERT_TRUE(Step(*shard, 0, 1, {7}, {-2, -2}).ok());  // round 1 open
  const Shard::Snapshot snapshot = shard->EncodeSnapshot();
  ShardOptions o = shard->options();
  auto created = Shard::Create(o);
  ASSERT_TRUE(created.ok());
  Shard& restored = **created;
  ASSERT_TRUE(restored.RestoreSnapshot(snapshot.payload).ok());
  EXPECT_EQ(Rows(restored, {4, 7, 8}), Rows(*shard, {4, 7, 8}));
  // Both finish round 1 the same way: the buffered rows of worker 0 came through.
  ASSERT_TRUE(restored.Register(0, kFp).ok());
  ASSERT_TRUE(restored.Register(1, kFp).ok());
  ASSERT_TRUE(Step(*shard, 1, 1, {8}, {1, 1}).ok());
  ASSERT_TRUE(Step(restored, 1, 1, {8}, {1, 1}).ok());
  EXPECT_EQ(restored.GetStatus().version, 2);
  EXPECT_EQ(Rows(restored, {4, 7, 8}), Rows(*shard, {4, 7, 8}));
  // Another sparse optimizer cannot take these rows' state.
  o.sparse_optimizer.kind = SparseOptimizerKind::kAdagrad;
  auto other = Shard::Create(o);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)->RestoreSnapshot(snapshot.payload).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ShardSparse, ChainSnapshotsAreIncrementalBetweenFullOnesAndRestoreOverTheirBase) {
  auto shard = MakeShard(ConsistencyMode::kAsp, 1);
  std::vector<uint64_t> many;
  std::vector<float> grads;
  for (uint64_t k = 100; k < 400; ++k) {
    many.push_back(k);
    grads.insert(grads.end(), {0.5f, 0.25f});
  }
  ASSERT_TRUE(shard->Push(PushOf(0, 0, many, grads, *shard)).ok());
  const Shard::Snapshot full = shard->EncodeSnapshot(Shard::SnapshotUse::kChain);
  EXPECT_EQ(full.base_version, -1);
  ASSERT_TRUE(shard->Push(PushOf(0, 1, {7, 150}, {1, 2, 3, 4}, *shard)).ok());
  const Shard::Snapshot increment = shard->EncodeSnapshot(Shard::SnapshotUse::kChain);
  EXPECT_EQ(increment.base_version, full.version);
  EXPECT_EQ(increment.version, 2);
  EXPECT_LT(increment.payload.size() * 10, full.payload.size());  // two rows, not 300
  auto fresh = [&shard] {
    auto created = Shard::Create(shard->options());
    EXPECT_TRUE(created.ok());
    return std::move(*created);
  };
  auto restored = fresh();
  ASSERT_TRUE(restored
                  ->RestoreSnapshot(increment.payload,
                                    [&full](int64_t version) -> absl::StatusOr<std::string> {
                                      EXPECT_EQ(version, full.version);
                                      return full.payload;
                                    })
                  .ok());
  std::vector<uint64_t> probe = many;
  probe.push_back(7);
  EXPECT_EQ(Rows(*restored, probe), Rows(*shard, probe));
  EXPECT_EQ(restored->GetStatus().version, 2);
  EXPECT_EQ(restored->TableStatuses()[0].rows, 301);
  // Without its base, or over another snapshot, it is refused and the shard is unchanged.
  EXPECT_EQ(fresh()->RestoreSnapshot(increment.payload).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(fresh()
                ->RestoreSnapshot(increment.payload,
                                  [](int64_t) -> absl::StatusOr<std::string> {
                                    return absl::NotFoundError("gone");
                                  })
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(fresh()
                ->RestoreSnapshot(increment.payload,
                                  [&increment](int64_t) -> absl::StatusOr<std::string> {
                                    return increment.payload;
                                  })
                .code(),
            absl::StatusCode::kDataLoss);
  // The chain starts over with a full one after RestartSnapshotChain.
  shard->RestartSnapshotChain();
  EXPECT_EQ(shard->EncodeSnapshot(Shard::SnapshotUse::kChain).base_version, -1);
}

TEST(ShardSparse, FullEveryNthChainSnapshotAndStandaloneOnesAreAlwaysFull) {
  ShardOptions o;
  o.consistency.mode = ConsistencyMode::kAsp;
  o.consistency.num_workers = 1;
  o.full_snapshot_every = 3;
  auto created = Shard::Create(o);
  ASSERT_TRUE(created.ok());
  Shard& shard = **created;
  ASSERT_TRUE(shard.Init(kFp, 2, KeyRange{0, 2}, {1, 1}, {kTable}).ok());
  ASSERT_TRUE(shard.Register(0, kFp).ok());
  std::vector<int64_t> bases;
  for (int64_t c = 0; c < 6; ++c) {
    ASSERT_TRUE(shard.Push(PushOf(0, c, {static_cast<uint64_t>(c)}, {1, 1}, shard)).ok());
    EXPECT_EQ(shard.EncodeSnapshot().base_version, -1);
    bases.push_back(shard.EncodeSnapshot(Shard::SnapshotUse::kChain).base_version);
  }
  EXPECT_EQ(bases, (std::vector<int64_t>{-1, 1, 1, -1, 4, 4}));
  o.full_snapshot_every = 0;
  EXPECT_EQ(Shard::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

// The writer's queue under a slow disk: what a newer queued snapshot supersedes is dropped, and
// what stays restores the newest state (its newest snapshot, over its base when incremental).
TEST(ShardSparse, AQueuedSnapshotDropsTheOnesItSupersedes) {
  // (version, base_version) of each queued snapshot, oldest first.
  using Queue = std::vector<std::pair<int64_t, int64_t>>;
  auto coalesce = [](const Queue& in, int* dropped) {
    std::deque<ShardSnapshot> queue;
    for (const auto& [version, base] : in) queue.push_back({version, base, "payload"});
    *dropped = DropSupersededSnapshots(&queue);
    Queue out;
    for (const ShardSnapshot& s : queue) {
      EXPECT_EQ(s.payload, "payload");
      out.emplace_back(s.version, s.base_version);
    }
    return out;
  };
  int dropped = -1;
  EXPECT_EQ(coalesce({}, &dropped), Queue{});
  EXPECT_EQ(dropped, 0);
  EXPECT_EQ(coalesce({{5, 0}}, &dropped), (Queue{{5, 0}}));
  EXPECT_EQ(dropped, 0);
  // Incremental ones over a base the writer has taken: the newest holds all of their changes.
  EXPECT_EQ(coalesce({{5, 0}, {10, 0}, {15, 0}}, &dropped), (Queue{{15, 0}}));
  EXPECT_EQ(dropped, 2);
  // A full one supersedes everything before it; its increments after it need it.
  EXPECT_EQ(coalesce({{5, 0}, {10, -1}, {15, 10}, {20, 10}}, &dropped),
            (Queue{{10, -1}, {20, 10}}));
  EXPECT_EQ(dropped, 2);
  EXPECT_EQ(coalesce({{5, 0}, {10, -1}, {15, 10}, {20, -1}}, &dropped), (Queue{{20, -1}}));
  EXPECT_EQ(dropped, 3);
  EXPECT_EQ(coalesce({{10, -1}, {20, -1}, {30, -1}}, &dropped), (Queue{{30, -1}}));
  EXPECT_EQ(dropped, 2);
  EXPECT_EQ(coalesce({{10, -1}, {15, 10}}, &dropped), (Queue{{10, -1}, {15, 10}}));
  EXPECT_EQ(dropped, 0);
}

TEST(ShardSparse, TableStatusCountsRowsEvictionsAndTheTimeOnRows) {
  ShardOptions o;
  o.consistency.mode = ConsistencyMode::kAsp;
  o.consistency.num_workers = 1;
  o.sparse_memory = {2, EvictionPolicy::kLru, 0};
  auto created = Shard::Create(o);
  ASSERT_TRUE(created.ok());
  Shard& shard = **created;
  ASSERT_TRUE(shard.Init(kFp, 2, KeyRange{0, 2}, {1, 1}, {kTable}).ok());
  ASSERT_TRUE(shard.Register(0, kFp).ok());
  ASSERT_TRUE(shard.Push(PushOf(0, 0, {1, 2, 3}, {1, 1, 1, 1, 1, 1}, shard)).ok());
  Rows(shard, {1, 2});
  const SparseTableStatus t = shard.TableStatuses()[0];
  EXPECT_EQ(t.rows, 2);
  EXPECT_EQ(t.capacity, 2);
  EXPECT_EQ(t.counters.admissions, 3);
  EXPECT_EQ(t.counters.evictions, 1);
  const SparseCallTiming timing = shard.sparse_timing();
  EXPECT_EQ(timing.pushes, 1);
  EXPECT_EQ(timing.pulls, 1);
  EXPECT_GE(timing.push_seconds, 0.0);
  o.sparse_memory.capacity = -1;
  EXPECT_EQ(Shard::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
