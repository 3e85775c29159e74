#include "worker/batch_plan.h"

#include <algorithm>
#include <set>

#include "gtest/gtest.h"

namespace ps {
namespace {

BatchPlan Make(int64_t n, int workers, int rank, int batch, int accumulate, uint64_t seed = 3) {
  BatchPlanOptions o;
  o.dataset_size = n;
  o.num_workers = workers;
  o.rank = rank;
  o.batch_size = batch;
  o.accumulate = accumulate;
  o.seed = seed;
  auto p = BatchPlan::Create(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return *p;
}

std::vector<int32_t> GlobalBatch(int64_t n, int workers, int batch, int accumulate, int64_t step) {
  std::vector<int32_t> all, part;
  for (int r = 0; r < workers; ++r) {
    BatchPlan p = Make(n, workers, r, batch, accumulate);
    for (int k = 0; k < accumulate; ++k) {
      p.MicroBatch(step, k, &part);
      all.insert(all.end(), part.begin(), part.end());
    }
  }
  return all;
}

TEST(BatchPlan, GlobalBatchIsTheSameWhateverTheSplit) {
  for (int64_t step : {0, 5, 9, 10, 23}) {
    const auto one = GlobalBatch(100, 1, 8, 1, step);
    EXPECT_EQ(GlobalBatch(100, 2, 4, 1, step), one) << step;
    EXPECT_EQ(GlobalBatch(100, 1, 4, 2, step), one) << step;
    EXPECT_EQ(GlobalBatch(100, 4, 1, 2, step), one) << step;
  }
}

TEST(BatchPlan, AnEpochVisitsDistinctSamplesAndDropsThePartialBatch) {
  BatchPlan p = Make(100, 1, 0, 8, 1);
  EXPECT_EQ(p.steps_per_epoch(), 12);
  std::set<int32_t> seen;
  std::vector<int32_t> b;
  for (int64_t s = 0; s < p.steps_per_epoch(); ++s) {
    p.MicroBatch(s, 0, &b);
    for (int32_t i : b) {
      EXPECT_TRUE(i >= 0 && i < 100);
      EXPECT_TRUE(seen.insert(i).second) << "sample " << i << " twice";
    }
  }
  EXPECT_EQ(seen.size(), 96u);
}

TEST(BatchPlan, EpochsUseDifferentOrdersAndTheSeedFixesThem) {
  BatchPlan p = Make(100, 1, 0, 8, 1);
  std::vector<int32_t> e0, e1, again;
  p.MicroBatch(0, 0, &e0);
  p.MicroBatch(12, 0, &e1);
  EXPECT_NE(e0, e1);
  BatchPlan q = Make(100, 1, 0, 8, 1);
  q.MicroBatch(12, 0, &again);  // a fresh (restarted) worker computes the same samples
  EXPECT_EQ(e1, again);
  BatchPlan other_seed = Make(100, 1, 0, 8, 1, /*seed=*/4);
  other_seed.MicroBatch(0, 0, &again);
  EXPECT_NE(e0, again);
}

TEST(BatchPlan, RejectsBadOptions) {
  BatchPlanOptions o;
  o.dataset_size = 10;
  o.num_workers = 2;
  o.rank = 2;
  EXPECT_EQ(BatchPlan::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.rank = 0;
  o.batch_size = 8;  // global batch 16 > 10 samples
  EXPECT_EQ(BatchPlan::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.batch_size = 0;
  EXPECT_EQ(BatchPlan::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
