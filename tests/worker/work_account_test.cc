#include "worker/work_account.h"

#include "gtest/gtest.h"

namespace ps {
namespace {

ShardReport::Worker W(int rank, const std::string& state, int64_t clock, int64_t applied,
                      int64_t planned, int64_t samples = 32) {
  ShardReport::Worker w;
  w.rank = rank;
  w.state = state;
  w.clock = clock;
  w.applied = applied;
  w.planned_steps = planned;
  w.samples_per_step = samples;
  return w;
}

ShardReport Shard(std::vector<ShardReport::Worker> workers, bool finished_at_restore = false) {
  ShardReport r;
  r.workers = std::move(workers);
  r.finished_at_restore = finished_at_restore;
  return r;
}

TEST(WorkAccount, EveryStepAppliedOnEveryShardIsAFinishedJobWithNothingSkipped) {
  const WorkAccount a =
      AccountWork({Shard({W(0, "live", 10, 10, 10), W(1, "expired", 10, 10, 10)}),
                   Shard({W(0, "live", 10, 10, 10), W(1, "expired", 10, 10, 10)})});
  EXPECT_TRUE(a.job_done);
  EXPECT_EQ(a.gradients_expected, 40);
  EXPECT_EQ(a.gradients_applied, 40);
  EXPECT_EQ(a.samples_skipped, 0);
  ASSERT_EQ(a.workers.size(), 2u);
  EXPECT_EQ(a.workers[1].state, "finished");
  EXPECT_FALSE(a.finished_at_restore);
}

// Rank 1 was removed after 4 of its 10 steps (BSP went on without it); a step that one shard
// missed counts as skipped, though the other shard applied it.
TEST(WorkAccount, AGoneWorkersMissingStepsAreSkippedWithTheirSamples) {
  const WorkAccount a = AccountWork({Shard({W(0, "live", 10, 10, 10), W(1, "expired", 4, 4, 10)}),
                                     Shard({W(0, "live", 10, 9, 10), W(1, "expired", 5, 5, 10)})});
  EXPECT_TRUE(a.job_done);
  EXPECT_EQ(a.gradients_expected, 40);
  EXPECT_EQ(a.gradients_applied, 28);
  EXPECT_EQ(a.workers[0].steps_skipped, 1);
  EXPECT_EQ(a.workers[0].samples_skipped, 32);
  EXPECT_EQ(a.workers[1].state, "gone");
  EXPECT_EQ(a.workers[1].steps_skipped, 6);
  EXPECT_EQ(a.workers[1].samples_skipped, 6 * 32);
  EXPECT_EQ(a.samples_skipped, 7 * 32);
}

TEST(WorkAccount, ALiveOrPendingWorkerWithStepsToGoKeepsTheJobOpen) {
  EXPECT_FALSE(AccountWork({Shard({W(0, "live", 10, 10, 10), W(1, "live", 7, 7, 10)})}).job_done);
  EXPECT_FALSE(AccountWork({Shard({W(0, "live", 10, 10, 10), W(1, "pending", 0, 0, 0)})}).job_done);
  // Nobody declared anything yet: nothing can be judged.
  EXPECT_FALSE(AccountWork({Shard({W(0, "live", 0, 0, 0), W(1, "live", 0, 0, 0)})}).job_done);
}

// A rank that never declared (removed before its first beat) owes what the others declared.
TEST(WorkAccount, ARankThatNeverDeclaredOwesTheJobsSteps) {
  const WorkAccount a = AccountWork({Shard({W(0, "live", 6, 6, 6, 16), W(1, "expired", 0, 0, 0, 0)},
                                           /*finished_at_restore=*/true)});
  EXPECT_TRUE(a.job_done);
  EXPECT_EQ(a.workers[1].planned_steps, 6);
  EXPECT_EQ(a.workers[1].samples_skipped, 6 * 16);
  EXPECT_EQ(a.gradients_expected, 12);
  EXPECT_TRUE(a.finished_at_restore);
}

// Rank 1 has not declared yet and has passed rank 0's 3 steps: it may still push (a Python rank
// declares at finish()), so the job stays open until it declares or goes.
TEST(WorkAccount, ALiveRankThatHasNotDeclaredIsNotTakenAsFinished) {
  EXPECT_FALSE(AccountWork({Shard({W(0, "expired", 3, 3, 3), W(1, "live", 5, 5, 0)})}).job_done);
  const WorkAccount declared =
      AccountWork({Shard({W(0, "expired", 3, 3, 3), W(1, "expired", 8, 8, 8)})});
  EXPECT_TRUE(declared.job_done);
  EXPECT_EQ(declared.gradients_expected, 11);
  EXPECT_EQ(declared.workers[1].state, "finished");
  const WorkAccount gone =
      AccountWork({Shard({W(0, "expired", 3, 3, 3), W(1, "expired", 5, 5, 0)})});
  EXPECT_TRUE(gone.job_done);
  EXPECT_EQ(gone.workers[1].state, "finished");
  EXPECT_EQ(gone.workers[1].planned_steps, 3);
}

}  // namespace
}  // namespace ps
