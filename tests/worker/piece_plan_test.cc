// The transfer planner: parts cut at the shards' boundaries, chunks, connections.

#include "worker/piece_plan.h"

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(PlanPieces, TheWholeBufferIsOnePiecePerShard) {
  const KeyRange whole{0, 10};
  auto pieces = PlanPieces(absl::MakeConstSpan(&whole, 1), PiecePlanOptions{10, 3, 0, 1});
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  EXPECT_EQ(*pieces,
            (std::vector<Piece>{{0, 0, 0, {0, 4}}, {0, 1, 0, {4, 7}}, {0, 2, 0, {7, 10}}}));
}

// Layer-sized parts (priority scheduling) are cut where the shards' ranges meet, in part order.
TEST(PlanPieces, PartsAreCutAtTheShardsBoundaries) {
  const std::vector<KeyRange> parts = {{0, 3}, {3, 8}, {8, 10}};
  auto pieces = PlanPieces(parts, PiecePlanOptions{10, 2, 0, 1});
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  EXPECT_EQ(*pieces,
            (std::vector<Piece>{
                {0, 0, 0, {0, 3}}, {1, 0, 0, {3, 5}}, {1, 1, 0, {5, 8}}, {2, 1, 0, {8, 10}}}));
}

// chunk_bytes 12 = 3 floats: a shard's 7 elements go in ceil(7/3) = 3 near-equal chunks, over
// the shard's 2 connections in turn.
TEST(PlanPieces, ChunksSpreadOverTheConnections) {
  const KeyRange whole{0, 7};
  auto pieces = PlanPieces(absl::MakeConstSpan(&whole, 1), PiecePlanOptions{7, 1, 12, 2});
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  EXPECT_EQ(*pieces, (std::vector<Piece>{{0, 0, 0, {0, 2}}, {0, 0, 1, {2, 4}}, {0, 0, 0, {4, 7}}}));
}

// More shards than parameters: a shard with an empty range still gets its (empty) piece, so it
// hears of the clock.
TEST(PlanPieces, AShardWithAnEmptyRangeGetsAnEmptyPiece) {
  const KeyRange whole{0, 2};
  auto pieces = PlanPieces(absl::MakeConstSpan(&whole, 1), PiecePlanOptions{2, 3, 0, 1});
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  EXPECT_EQ(*pieces, (std::vector<Piece>{{0, 0, 0, {0, 1}}, {0, 1, 0, {1, 2}}, {0, 2, 0, {2, 2}}}));
}

TEST(PlanPieces, EmptyOrOutsidePartsAreInvalidArgument) {
  for (const KeyRange bad : {KeyRange{3, 3}, KeyRange{-1, 2}, KeyRange{5, 11}, KeyRange{4, 2}}) {
    EXPECT_EQ(
        PlanPieces(absl::MakeConstSpan(&bad, 1), PiecePlanOptions{10, 2, 0, 1}).status().code(),
        absl::StatusCode::kInvalidArgument)
        << bad.begin << ".." << bad.end;
  }
}

TEST(LoneChunkBytes, SmallPullsWholeLargeOnesInAtLeastTwoCallsOfAtMost2MiB) {
  EXPECT_EQ(LoneChunkBytes(64 << 10), 0);
  EXPECT_EQ(LoneChunkBytes((512 << 10) - 4), 0);
  EXPECT_EQ(LoneChunkBytes(512 << 10), 256 << 10);
  EXPECT_EQ(LoneChunkBytes(1 << 20), 512 << 10);
  EXPECT_EQ(LoneChunkBytes((3 << 20) + 8), (3 << 19) + 4);
  EXPECT_EQ(LoneChunkBytes(5 << 20), 2 << 20);
  EXPECT_EQ(LoneChunkBytes(1000004), 500004);  // half of 1000004 is 500002: whole floats
  EXPECT_EQ(LoneChunkBytes(64 << 20), 2 << 20);
  // 1 MiB over 2 connections: two 512 KiB calls, one on each.
  const KeyRange whole{0, 1 << 18};
  auto pieces = PlanPieces(absl::MakeConstSpan(&whole, 1),
                           PiecePlanOptions{1 << 18, 1, LoneChunkBytes(1 << 20), 2});
  ASSERT_TRUE(pieces.ok());
  EXPECT_EQ(*pieces, (std::vector<Piece>{{0, 0, 0, {0, 1 << 17}}, {0, 0, 1, {1 << 17, 1 << 18}}}));
}

}  // namespace
}  // namespace ps
