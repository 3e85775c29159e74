// Sparse tables: rows created on first update from initial values fixed by the key, reads of
// absent rows, each row-wise optimizer against its formula, key ownership and checkpoints.

#include "common/optim/sparse_table.h"

#include <cmath>
#include <set>
#include <vector>

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
  EXPECT_EQ(table.bytes(), 2 * (4 * 6 + 16));
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
