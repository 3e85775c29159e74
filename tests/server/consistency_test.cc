#include "server/consistency.h"

#include "gtest/gtest.h"

namespace ps {
namespace {

ConsistencyController Make(ConsistencyMode mode, int workers, int staleness = 0) {
  ConsistencyOptions o;
  o.mode = mode;
  o.num_workers = workers;
  o.staleness = staleness;
  return ConsistencyController(o);
}

TEST(ConsistencyController, BspPullWaitsForThePreviousRound) {
  auto c = Make(ConsistencyMode::kBsp, 2);
  c.Register(0);
  c.Register(1);
  EXPECT_TRUE(c.PullReady(0));
  EXPECT_EQ(*c.ClassifyPush(0, 0), PushAction::kBuffer);
  c.RecordPush(0);
  EXPECT_FALSE(c.RoundReady());
  EXPECT_FALSE(c.PullReady(1));
  EXPECT_EQ(*c.ClassifyPush(1, 0), PushAction::kBuffer);
  c.RecordPush(1);
  EXPECT_TRUE(c.RoundReady());
  c.CompleteRound();
  EXPECT_TRUE(c.PullReady(1));
  EXPECT_FALSE(c.PullReady(2));
}

TEST(ConsistencyController, BspRoundWaitsForWorkersThatNeverRegistered) {
  auto c = Make(ConsistencyMode::kBsp, 2);
  c.Register(0);
  c.RecordPush(0);
  EXPECT_FALSE(c.RoundReady());  // rank 1 is pending, still a member
}

TEST(ConsistencyController, BspExpiredWorkerLeavesTheBarrierAndIsMovedUpOnReturn) {
  auto c = Make(ConsistencyMode::kBsp, 2);
  c.Register(0);
  c.Register(1);
  c.RecordPush(0);
  c.Expire(1);
  EXPECT_EQ(c.state(1), WorkerState::kExpired);
  EXPECT_TRUE(c.RoundReady());
  c.CompleteRound();
  EXPECT_EQ(c.Register(1), 1);  // rejoins at the open round, not at the one it missed
}

TEST(ConsistencyController, BspCountsTheRoundsAReturningWorkerIsMovedPast) {
  auto c = Make(ConsistencyMode::kBsp, 2);
  c.Register(0);
  c.Register(1);
  c.Expire(1);
  for (int round = 0; round < 3; ++round) {  // rounds 0, 1, 2 without worker 1
    c.RecordPush(0);
    ASSERT_TRUE(c.RoundReady());
    c.CompleteRound();
  }
  EXPECT_EQ(c.skipped(1), 0);
  EXPECT_EQ(c.Register(1), 3);
  EXPECT_EQ(c.skipped(1), 3);  // its steps 0, 1 and 2 are in no update
  EXPECT_EQ(c.skipped(0), 0);
  EXPECT_EQ(c.Register(1), 3);  // a live worker registering again skips nothing more
  EXPECT_EQ(c.skipped(1), 3);
}

TEST(ConsistencyController, SspAndAspNeverSkipAReturningWorkersSteps) {
  for (ConsistencyMode mode : {ConsistencyMode::kSsp, ConsistencyMode::kAsp}) {
    auto c = Make(mode, 2, /*staleness=*/1);
    c.Register(0);
    c.Register(1);
    c.Expire(1);
    c.RecordPush(0);
    c.RecordPush(0);
    EXPECT_EQ(c.Register(1), 0);  // it resumes at its own clock: nothing was applied without it
    EXPECT_EQ(c.skipped(1), 0);
  }
}

TEST(ConsistencyController, BspRejectsAPushAheadOfTheOpenRound) {
  auto c = Make(ConsistencyMode::kBsp, 2);
  c.Register(0);
  c.RecordPush(0);  // clock 1 while round 0 is open
  EXPECT_EQ(c.ClassifyPush(0, 1).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ConsistencyController, SspPullBlocksWhenAheadOfSlowestBySPlusOne) {
  auto c = Make(ConsistencyMode::kSsp, 2, /*staleness=*/2);
  c.Register(0);
  c.Register(1);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(*c.ClassifyPush(0, i), PushAction::kApply);
    c.RecordPush(0);
  }
  EXPECT_EQ(c.MinClock(), 0);
  EXPECT_TRUE(c.PullReady(2));   // 2 - 2 <= 0
  EXPECT_FALSE(c.PullReady(3));  // 3 - 2 > 0
  c.RecordPush(1);
  EXPECT_TRUE(c.PullReady(3));
}

TEST(ConsistencyController, SspZeroGivesBspReadGuarantee) {
  auto c = Make(ConsistencyMode::kSsp, 2, 0);
  c.Register(0);
  c.Register(1);
  c.RecordPush(0);
  EXPECT_FALSE(c.PullReady(1));
  c.RecordPush(1);
  EXPECT_TRUE(c.PullReady(1));
}

TEST(ConsistencyController, AspNeverWaitsAndHasNoRounds) {
  auto c = Make(ConsistencyMode::kAsp, 3);
  EXPECT_TRUE(c.PullReady(1000000));
  for (int r = 0; r < 3; ++r) {
    c.Register(r);
    c.RecordPush(r);
  }
  EXPECT_FALSE(c.RoundReady());
}

TEST(ConsistencyController, DuplicateAndFutureClocks) {
  auto c = Make(ConsistencyMode::kAsp, 1);
  c.Register(0);
  c.RecordPush(0);
  EXPECT_EQ(*c.ClassifyPush(0, 0), PushAction::kDuplicate);
  EXPECT_EQ(c.ClassifyPush(0, 2).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*c.ClassifyPush(0, 1), PushAction::kApply);
}

TEST(ConsistencyController, MinClockIgnoresExpiredWorkers) {
  auto c = Make(ConsistencyMode::kSsp, 2, 1);
  c.Register(0);
  c.Register(1);
  c.RecordPush(0);
  c.RecordPush(0);
  EXPECT_EQ(c.MinClock(), 0);
  c.Expire(1);
  EXPECT_EQ(c.MinClock(), 2);
  c.Expire(0);
  EXPECT_EQ(c.MinClock(), 2);  // nobody left: the largest clock
}

TEST(ConsistencyMode, ParsesNames) {
  EXPECT_EQ(*ParseConsistencyMode("ssp"), ConsistencyMode::kSsp);
  EXPECT_EQ(ParseConsistencyMode("BSP").status().code(), absl::StatusCode::kInvalidArgument);
  ConsistencyOptions o;
  o.num_workers = 0;
  EXPECT_EQ(ValidateConsistencyOptions(o).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
