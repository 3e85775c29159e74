#include "common/base/param_layout.h"

#include <numeric>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(ParamLayout, OffsetsFollowTensorOrder) {
  auto layout = ParamLayout::Create({{"w", {3, 4}}, {"b", {4}}, {"v", {2, 2, 2}}});
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->offset(0), 0);
  EXPECT_EQ(layout->offset(1), 12);
  EXPECT_EQ(layout->offset(2), 16);
  EXPECT_EQ(layout->total(), 24);
}

TEST(ParamLayout, FingerprintSeesNamesShapesAndOrder) {
  const uint64_t base = ParamLayout::Create({{"w", {3, 4}}, {"b", {4}}})->fingerprint();
  EXPECT_EQ(ParamLayout::Create({{"w", {3, 4}}, {"b", {4}}})->fingerprint(), base);
  EXPECT_NE(ParamLayout::Create({{"w", {4, 3}}, {"b", {4}}})->fingerprint(), base);
  EXPECT_NE(ParamLayout::Create({{"b", {4}}, {"w", {3, 4}}})->fingerprint(), base);
  EXPECT_NE(ParamLayout::Create({{"x", {3, 4}}, {"b", {4}}})->fingerprint(), base);
  // Same concatenated characters, different split between names.
  EXPECT_NE(ParamLayout::Create({{"ab", {1}}, {"c", {1}}})->fingerprint(),
            ParamLayout::Create({{"a", {1}}, {"bc", {1}}})->fingerprint());
}

TEST(ParamLayout, RejectsBadSpecs) {
  EXPECT_EQ(ParamLayout::Create({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParamLayout::Create({{"", {1}}}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParamLayout::Create({{"a", {1}}, {"a", {2}}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParamLayout::Create({{"a", {2, 0}}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParamLayout::Create({{"a", {}}}).status().code(), absl::StatusCode::kInvalidArgument);
}

// Checks that the S ranges tile [0, total) in order with sizes differing by at most one.
void ExpectBalancedTiling(int64_t total, int shards) {
  int64_t next = 0;
  int64_t min_size = total;
  int64_t max_size = 0;
  for (int s = 0; s < shards; ++s) {
    const KeyRange r = ShardRange(total, shards, s);
    EXPECT_EQ(r.begin, next) << "total=" << total << " shards=" << shards << " s=" << s;
    EXPECT_GE(r.end, r.begin);
    next = r.end;
    min_size = std::min(min_size, r.size());
    max_size = std::max(max_size, r.size());
  }
  EXPECT_EQ(next, total);
  EXPECT_LE(max_size - min_size, 1);
}

TEST(ShardRange, EvenSplit) {
  EXPECT_EQ(ShardRange(12, 3, 0), (KeyRange{0, 4}));
  EXPECT_EQ(ShardRange(12, 3, 1), (KeyRange{4, 8}));
  EXPECT_EQ(ShardRange(12, 3, 2), (KeyRange{8, 12}));
}

TEST(ShardRange, UnevenSplitGivesTheRemainderToTheFirstShards) {
  EXPECT_EQ(ShardRange(10, 3, 0), (KeyRange{0, 4}));
  EXPECT_EQ(ShardRange(10, 3, 1), (KeyRange{4, 7}));
  EXPECT_EQ(ShardRange(10, 3, 2), (KeyRange{7, 10}));
}

TEST(ShardRange, MoreShardsThanElementsLeavesEmptyRanges) {
  EXPECT_EQ(ShardRange(2, 4, 0), (KeyRange{0, 1}));
  EXPECT_EQ(ShardRange(2, 4, 1), (KeyRange{1, 2}));
  EXPECT_EQ(ShardRange(2, 4, 2), (KeyRange{2, 2}));
  EXPECT_EQ(ShardRange(2, 4, 3), (KeyRange{2, 2}));
  EXPECT_EQ(ShardRange(0, 2, 1), (KeyRange{0, 0}));
}

TEST(ShardRange, MoreShardsThanTensorsSplitsTensorsAcrossShards) {
  // Two tensors (12 + 4 elements) over 5 shards: the weight spans shards 0..3.
  auto layout = ParamLayout::Create({{"w", {3, 4}}, {"b", {4}}});
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(ShardRange(layout->total(), 5, 0), (KeyRange{0, 4}));
  EXPECT_EQ(ShardRange(layout->total(), 5, 3), (KeyRange{10, 13}));
  EXPECT_EQ(ShardRange(layout->total(), 5, 4), (KeyRange{13, 16}));
}

TEST(ShardRange, TilesEverySmallCase) {
  for (int64_t total = 0; total <= 40; ++total) {
    for (int shards = 1; shards <= 9; ++shards) ExpectBalancedTiling(total, shards);
  }
  ExpectBalancedTiling(235146, 7);
}

// A description without sparse tables has its dense layout's fingerprint (so today's models,
// checkpoints and shards keep theirs); a sparse table changes it, by name, dimension and scale.
TEST(ParamDescription, FingerprintCoversTheSparseTables) {
  auto dense = ParamLayout::Create({{"fc1.weight", {3, 2}}, {"fc1.bias", {2}}});
  ASSERT_TRUE(dense.ok());
  auto plain = ParamDescription::Create(*dense);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->fingerprint(), dense->fingerprint());
  EXPECT_TRUE(plain->sparse().empty());
  auto items = ParamDescription::Create(*dense, {SparseTableSpec{"items", 16, 0.01f}});
  ASSERT_TRUE(items.ok()) << items.status();
  EXPECT_NE(items->fingerprint(), dense->fingerprint());
  EXPECT_EQ(items->sparse()[0].dim, 16);
  for (const SparseTableSpec& other :
       {SparseTableSpec{"users", 16, 0.01f}, SparseTableSpec{"items", 8, 0.01f},
        SparseTableSpec{"items", 16, 0.02f}}) {
    auto d = ParamDescription::Create(*dense, {other});
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_NE(d->fingerprint(), items->fingerprint()) << other.name;
  }
}

TEST(ParamDescription, RefusesBadOrCollidingTables) {
  auto dense = ParamLayout::Create({{"fc1.weight", {3, 2}}});
  ASSERT_TRUE(dense.ok());
  for (const std::vector<SparseTableSpec>& bad :
       std::vector<std::vector<SparseTableSpec>>{{{"", 4, 0.01f}},
                                                 {{"fc1.weight", 4, 0.01f}},
                                                 {{"t", 4, 0.01f}, {"t", 8, 0.01f}},
                                                 {{"t", 0, 0.01f}},
                                                 {{"t", 4, 0.0f}}}) {
    EXPECT_EQ(ParamDescription::Create(*dense, bad).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace ps
