// Sparse tables: rows created on first update from initial values fixed by the key, reads of
// absent rows, each row-wise optimizer against its formula, batches against single keys, key
// ownership and checkpoints.

#include "common/optim/sparse_table.h"

#include <cmath>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/random.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

const SparseTableSpec kSpec{"embeddings", 3, 0.05f};

std::vector<float> Initial(uint64_t key, const SparseTableSpec& spec = kSpec) {
  std::vector<float> row(spec.dim);
  SparseTable::InitialRow(spec, key, row.data());
  return row;
}

TEST(SparseTable, InitialRowsDependOnTableAndKeyOnly) {
  const std::vector<float> a = Initial(42);
  EXPECT_EQ(a, Initial(42));
  EXPECT_NE(a, Initial(43));
  EXPECT_NE(a, Initial(42, SparseTableSpec{"other", 3, 0.05f}));
  for (float v : a) {
    EXPECT_GE(v, -0.05f);
    EXPECT_LT(v, 0.05f);
  }
}

TEST(SparseTable, ReadsAbsentRowsAsInitialWithoutCreatingThem) {
  SparseTable table(kSpec, {SparseOptimizerKind::kSgd, 0.5f});
  std::vector<float> out(6);
  const std::vector<uint64_t> keys = {7, 9};
  table.Read(keys, absl::MakeSpan(out));
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 3), Initial(7));
  EXPECT_EQ(std::vector<float>(out.begin() + 3, out.end()), Initial(9));
  EXPECT_EQ(table.rows(), 0);
}

TEST(SparseTable, SgdCreatesTheRowThenSteps) {
  SparseTable table(kSpec, {SparseOptimizerKind::kSgd, 0.5f});
  const std::vector<uint64_t> keys = {7};
  const std::vector<float> g = {1, -2, 4};
  table.Apply(keys, g, /*lr_scale=*/0.5f);
  EXPECT_EQ(table.rows(), 1);
  std::vector<float> out(3);
  table.Read(keys, absl::MakeSpan(out));
  const std::vector<float> w0 = Initial(7);
  for (int d = 0; d < 3; ++d) EXPECT_FLOAT_EQ(out[d], w0[d] - 0.25f * g[d]);
}

// Rows are updated as the dense slice is, flushing denormals to zero: Adagrad's square of
// 1e-20 (1e-40) leaves the row's sum of squares at zero.
TEST(SparseTable, UpdatesFlushDenormalsToZero) {
  SparseTable table(kSpec, {SparseOptimizerKind::kAdagrad, 0.1f, 0.9f, 0.999f, 1e-8f});
  const std::vector<uint64_t> keys = {7};
  table.Apply(keys, std::vector<float>{1e-20f, 1.0f, 0.0f}, /*lr_scale=*/1.0f);
  const SparseTable::Contents c = table.Export();
  ASSERT_EQ(c.state.size(), 3u);
  EXPECT_EQ(c.state[0], 0.0f);
  EXPECT_EQ(c.state[1], 1.0f);
}

TEST(SparseTable, AdagradAccumulatesSquaredGradientsPerRow) {
  SparseTable table(kSpec, {SparseOptimizerKind::kAdagrad, 0.1f, 0.9f, 0.999f, 1e-8f});
  const std::vector<uint64_t> key = {5}, other = {6};
  const std::vector<float> g1 = {1, 2, -1}, g2 = {3, 0, 1}, g3 = {2, 2, 2};
  table.Apply(key, g1);
  table.Apply(other, g3);  // another row: its own accumulator
  table.Apply(key, g2);
  std::vector<float> out(3);
  table.Read(key, absl::MakeSpan(out));
  const std::vector<float> w0 = Initial(5);
  for (int d = 0; d < 3; ++d) {
    double w = w0[d];
    double acc = 0;
    for (float g : {g1[d], g2[d]}) {
      acc += static_cast<double>(g) * g;
      w -= 0.1 * g / (std::sqrt(acc) + 1e-8);
    }
    EXPECT_NEAR(out[d], w, 1e-6) << d;
  }
  EXPECT_EQ(table.StateWidth(), 3);
  EXPECT_EQ(table.bytes(), 2 * (4 * 6 + 24));  // values, state; key, count, last update
}

TEST(SparseTable, LazyAdamBiasCorrectsByTheRowsOwnUpdateCount) {
  SparseTable table(kSpec, {SparseOptimizerKind::kLazyAdam, 0.01f, 0.9f, 0.999f, 1e-8f});
  const std::vector<uint64_t> a = {1}, b = {2};
  const std::vector<float> g = {0.5f, -1.0f, 2.0f};
  table.Apply(a, g);
  table.Apply(a, g);
  table.Apply(b, g);  // its first update, whatever the others did
  std::vector<float> out(3);
  table.Read(b, absl::MakeSpan(out));
  const std::vector<float> w0 = Initial(2);
  // First Adam step: m/c1 = g, v/c2 = g^2, so w -= lr * g / (|g| + eps).
  for (int d = 0; d < 3; ++d) {
    EXPECT_NEAR(out[d], w0[d] - 0.01 * g[d] / (std::abs(g[d]) + 1e-8), 1e-7) << d;
  }
}

// The bias corrections of a row's first updates come from a table; past it, from std::pow. Both
// must be the plain recurrence's, to the bit, on either side of the table's end.
TEST(SparseTable, LazyAdamIsThePlainRecurrenceBitForBitBeyondItsCorrectionTable) {
  const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  SparseTable table(kSpec, {SparseOptimizerKind::kLazyAdam, lr, b1, b2, eps});
  const std::vector<uint64_t> key = {5};
  std::vector<float> w = Initial(5), m(3, 0.0f), v(3, 0.0f);
  for (int t = 1; t <= 4200; ++t) {
    const std::vector<float> g = {std::sin(0.1f * t), 0.5f, -2.0f + 0.001f * t};
    table.Apply(key, g);
    const float c1 = 1.0f - std::pow(b1, static_cast<float>(t));
    const float c2 = 1.0f - std::pow(b2, static_cast<float>(t));
    for (int d = 0; d < 3; ++d) {
      m[d] = b1 * m[d] + (1 - b1) * g[d];
      v[d] = b2 * v[d] + (1 - b2) * g[d] * g[d];
      w[d] -= lr * (m[d] / c1) / (std::sqrt(v[d] / c2) + eps);
    }
  }
  std::vector<float> out(3);
  table.Read(key, absl::MakeSpan(out));
  EXPECT_EQ(out, w);
  const SparseTable::Contents c = table.Export();
  EXPECT_EQ(c.state, (std::vector<float>{m[0], m[1], m[2], v[0], v[1], v[2]}));
  EXPECT_EQ(c.updates, std::vector<int64_t>{4200});
}

TEST(SparseTable, ExportRestoreRoundTripsAndChecksLengths) {
  SparseTable table(kSpec, {SparseOptimizerKind::kAdagrad, 0.1f});
  const std::vector<uint64_t> keys = {3, 8, 1};
  table.Apply(keys, std::vector<float>(9, 0.5f));
  SparseTable copy(kSpec, {SparseOptimizerKind::kAdagrad, 0.1f});
  ASSERT_TRUE(copy.Restore(table.Export()).ok());
  EXPECT_EQ(copy.rows(), 3);
  // Both take the next step the same way.
  table.Apply(keys, std::vector<float>(9, -0.25f));
  copy.Apply(keys, std::vector<float>(9, -0.25f));
  std::vector<float> x(9), y(9);
  table.Read(keys, absl::MakeSpan(x));
  copy.Read(keys, absl::MakeSpan(y));
  EXPECT_EQ(x, y);
  SparseTable::Contents bad = table.Export();
  bad.state.pop_back();
  EXPECT_EQ(copy.Restore(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = table.Export();
  bad.keys[1] = bad.keys[0];
  EXPECT_EQ(copy.Restore(bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(copy.rows(), 3);  // unchanged
}

// Rows of `keys`, read.
std::vector<float> ReadRows(const SparseTable& table, const std::vector<uint64_t>& keys) {
  std::vector<float> out(keys.size() * table.dim());
  table.Read(keys, absl::MakeSpan(out));
  return out;
}

void Touch(SparseTable& table, uint64_t key, float g = 1.0f) {
  const std::vector<uint64_t> keys = {key};
  table.Apply(keys, std::vector<float>(table.dim(), g));
}

TEST(SparseTable, AFullTableEvictsTheLeastRecentlyUpdatedOfItsSample) {
  // Capacity 8 = the sample size: the eviction looks at every row, and the least recent goes;
  // keys 1..8, then 1..7 again: key 8 is the least recent.
  SparseTable table(kSpec, {SparseOptimizerKind::kSgd, 0.5f}, {8, EvictionPolicy::kLru, 0});
  for (uint64_t k = 1; k <= 8; ++k) Touch(table, k);
  for (uint64_t k = 1; k <= 7; ++k) Touch(table, k);
  EXPECT_EQ(table.rows(), 8);
  Touch(table, 100);
  EXPECT_EQ(table.rows(), 8);
  EXPECT_EQ(table.counters().evictions, 1);
  EXPECT_EQ(table.counters().admissions, 9);
  const SparseTable::Contents c = table.Export();
  const std::set<uint64_t> kept(c.keys.begin(), c.keys.end());
  EXPECT_EQ(kept.count(100), 1u);
  EXPECT_EQ(kept.count(8), 0u);
  EXPECT_EQ(ReadRows(table, {8}), Initial(8));  // gone: it reads as a fresh row again
}

// At most kEvictionSample rows, the eviction looks at all of them: exact LFU.
TEST(SparseTable, LfuKeepsTheOftenUpdatedRows) {
  SparseTable table(kSpec, {SparseOptimizerKind::kSgd, 0.5f}, {4, EvictionPolicy::kLfu, 0});
  for (int i = 0; i < 5; ++i) {
    for (uint64_t k = 1; k <= 3; ++k) Touch(table, k);  // hot
  }
  for (uint64_t k = 10; k < 40; ++k) Touch(table, k);  // a stream of one-off keys
  const SparseTable::Contents c = table.Export();
  const std::set<uint64_t> kept(c.keys.begin(), c.keys.end());
  EXPECT_EQ(table.rows(), 4);
  for (uint64_t k = 1; k <= 3; ++k) EXPECT_EQ(kept.count(k), 1u) << k;
  EXPECT_EQ(table.counters().evictions, 30 - 1);
}

TEST(SparseTable, AKeyGetsItsRowAtItsNthGradientAndReadsZerosBefore) {
  SparseTable table(kSpec, {SparseOptimizerKind::kSgd, 0.5f}, {0, EvictionPolicy::kLru, 3});
  EXPECT_EQ(ReadRows(table, {5}), std::vector<float>(3, 0.0f));  // the shared default
  Touch(table, 5);
  Touch(table, 5);
  EXPECT_EQ(table.rows(), 0);
  EXPECT_EQ(table.counters().not_admitted, 2);
  EXPECT_EQ(ReadRows(table, {5}), std::vector<float>(3, 0.0f));
  Touch(table, 5, 2.0f);  // the third: admitted, created from its initial values, then stepped
  EXPECT_EQ(table.rows(), 1);
  EXPECT_EQ(table.counters().admissions, 1);
  const std::vector<float> w0 = Initial(5);
  const std::vector<float> w = ReadRows(table, {5});
  for (int d = 0; d < 3; ++d) EXPECT_FLOAT_EQ(w[d], w0[d] - 0.5f * 2.0f);
  EXPECT_EQ(table.bytes(), 4 * 3 + 24 + SparseTable::kSketchDepth * SparseTable::kSketchWidth * 2);
}

TEST(SparseTable, ChangesSinceTheMarkRebuildTheTableOverTheMarkedContents) {
  const SparseMemoryOptions memory{6, EvictionPolicy::kLru, 2};
  SparseTable table(kSpec, {SparseOptimizerKind::kAdagrad, 0.1f}, memory);
  for (uint64_t k = 1; k <= 5; ++k) {
    Touch(table, k);
    Touch(table, k);
  }
  table.MarkUnchanged();
  const SparseTable::Contents full = table.Export();
  Touch(table, 2, -1.0f);  // updated
  for (uint64_t k = 20; k <= 23; ++k) {
    Touch(table, k);
    Touch(table, k);  // created, and evicting some of the marked ones
  }
  Touch(table, 99);  // counted, not admitted
  const SparseTable::Contents delta = table.ExportChanges();
  EXPECT_FALSE(delta.removed.empty());
  EXPECT_LT(delta.keys.size(), 10u);
  SparseTable rebuilt(kSpec, {SparseOptimizerKind::kAdagrad, 0.1f}, memory);
  ASSERT_TRUE(rebuilt.Restore(full).ok());
  ASSERT_TRUE(rebuilt.ApplyChanges(delta).ok());
  const SparseTable::Contents a = table.Export(), b = rebuilt.Export();
  std::set<uint64_t> keys_a(a.keys.begin(), a.keys.end()), keys_b(b.keys.begin(), b.keys.end());
  EXPECT_EQ(keys_a, keys_b);
  std::vector<uint64_t> all(keys_a.begin(), keys_a.end());
  all.push_back(99);
  EXPECT_EQ(ReadRows(table, all), ReadRows(rebuilt, all));
  EXPECT_EQ(rebuilt.counters().evictions, table.counters().evictions);
  EXPECT_EQ(rebuilt.counters().not_admitted, table.counters().not_admitted);
  // The rebuilt table's rows sit in another order, so its later evictions may pick other rows
  // (sampled eviction is by slot); its rows and counters are the same.
}

TEST(SparseTable, MemoryOptionsAreCheckedAndRestoreKeepsTheCapacity) {
  EXPECT_TRUE(ValidateSparseMemoryOptions({}).ok());
  EXPECT_EQ(ValidateSparseMemoryOptions({-1, EvictionPolicy::kLru, 0}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSparseMemoryOptions({0, EvictionPolicy::kLru, 70000}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseEvictionPolicy("lfu").value(), EvictionPolicy::kLfu);
  EXPECT_EQ(ParseEvictionPolicy("fifo").status().code(), absl::StatusCode::kInvalidArgument);
  SparseTable big(kSpec, {SparseOptimizerKind::kSgd, 0.5f});
  for (uint64_t k = 1; k <= 5; ++k) Touch(big, k);
  SparseTable small(kSpec, {SparseOptimizerKind::kSgd, 0.5f}, {4, EvictionPolicy::kLru, 0});
  EXPECT_EQ(small.Restore(big.Export()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(small.rows(), 0);
}

// Apply finds a whole batch's rows before stepping them (prefetching ahead) when nothing can be
// evicted, and goes key by key when something can. Either way a batch leaves the table exactly
// as its keys applied one at a time would: the same rows, values, state, counters and clocks,
// and Read returns what one key at a time reads. Batches overlap, so rows are stepped again.
TEST(SparseTable, ABatchLeavesTheTableAsItsKeysOneAtATime) {
  const SparseTableSpec spec{"batched", 5, 0.05f};
  for (const SparseMemoryOptions& memory :
       {SparseMemoryOptions{}, SparseMemoryOptions{0, EvictionPolicy::kLru, 2},
        SparseMemoryOptions{300, EvictionPolicy::kLfu, 0}}) {
    SCOPED_TRACE(absl::StrCat("capacity ", memory.capacity, " admit_after ", memory.admit_after));
    SparseTable batched(spec, {SparseOptimizerKind::kLazyAdam, 0.01f}, memory);
    SparseTable single(spec, {SparseOptimizerKind::kLazyAdam, 0.01f}, memory);
    for (int b = 0; b < 6; ++b) {
      std::set<uint64_t> distinct;
      for (int i = 0; i < 200; ++i) distinct.insert(Mix64(b * 53 + i) % 100000);
      const std::vector<uint64_t> keys(distinct.begin(), distinct.end());
      std::vector<float> grads(keys.size() * spec.dim);
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.001f * static_cast<float>(i % 13);
      batched.Apply(keys, grads);
      for (size_t i = 0; i < keys.size(); ++i) {
        single.Apply(absl::MakeConstSpan(&keys[i], 1),
                     absl::MakeConstSpan(grads.data() + i * spec.dim, spec.dim));
      }
      std::vector<float> read_batched(keys.size() * spec.dim), read_single(spec.dim);
      batched.Read(keys, absl::MakeSpan(read_batched));
      for (size_t i = 0; i < keys.size(); ++i) {
        single.Read(absl::MakeConstSpan(&keys[i], 1), absl::MakeSpan(read_single));
        ASSERT_EQ(std::vector<float>(read_batched.begin() + i * spec.dim,
                                     read_batched.begin() + (i + 1) * spec.dim),
                  read_single)
            << "batch " << b << " key " << keys[i];
      }
    }
    const SparseTable::Contents x = batched.Export(), y = single.Export();
    EXPECT_EQ(x.keys, y.keys);
    EXPECT_EQ(x.values, y.values);
    EXPECT_EQ(x.state, y.state);
    EXPECT_EQ(x.updates, y.updates);
    EXPECT_EQ(x.last_update, y.last_update);
    EXPECT_EQ(x.tick, y.tick);
    EXPECT_EQ(x.counters.admissions, y.counters.admissions);
    EXPECT_EQ(x.counters.evictions, y.counters.evictions);
    EXPECT_EQ(x.counters.not_admitted, y.counters.not_admitted);
    EXPECT_GT(x.keys.size(), 100u);
    EXPECT_EQ(x.counters.evictions > 0, memory.capacity > 0);
    EXPECT_EQ(x.counters.not_admitted > 0, memory.admit_after > 1);
  }
}

TEST(SparseTable, KeysSpreadOverShardsAndOptionsAreChecked) {
  std::vector<int> per_shard(4);
  for (uint64_t k = 0; k < 40000; ++k) ++per_shard[ShardOfKey(k, 4)];
  for (int n : per_shard) EXPECT_NEAR(n, 10000, 400);
  EXPECT_EQ(ShardOfKey(12345, 1), 0);
  EXPECT_TRUE(ValidateSparseOptimizerOptions({}).ok());
  EXPECT_EQ(ValidateSparseOptimizerOptions({SparseOptimizerKind::kSgd, 0.0f}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSparseOptimizerKind("adam").value(), SparseOptimizerKind::kLazyAdam);
  EXPECT_EQ(ParseSparseOptimizerKind("lamb").status().code(), absl::StatusCode::kInvalidArgument);
  for (auto kind :
       {SparseOptimizerKind::kAdagrad, SparseOptimizerKind::kLazyAdam, SparseOptimizerKind::kSgd}) {
    EXPECT_EQ(ParseSparseOptimizerKind(SparseOptimizerKindName(kind)).value(), kind);
  }
}

}  // namespace
}  // namespace ps
