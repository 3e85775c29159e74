// Load end to end: 32 worker processes against 2 shards for 60 s, with the count of pushes
// acknowledged to workers checked against the updates the shards applied. Prints pushes/s.

#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e/e2e_util.h"

namespace ps::e2e {
namespace {

// 32 worker processes of a small model against 2 shards for 60 s (ASP): no error, and no lost
// update: every push a worker saw acknowledged was applied exactly once.
TEST(LoadE2e, ThirtyTwoWorkersLoseNoUpdate) {
  if (!std::filesystem::exists(DataDir() + "/train-images-idx3-ubyte.gz")) {
    FAIL() << "Fashion-MNIST is missing in " << DataDir() << ": run scripts/setup.sh";
  }
  const std::string dir = RunDir("load");
  ASSERT_EQ(
      RunLaunch(dir, {"--data=fashion-mnist:" + DataDir(), "--train_limit=0", "--test_limit=1000",
                      "--hidden=32", "--shards=2", "--workers=32", "--mode=asp", "--batch_size=16",
                      "--epochs=100", "--max_seconds=60", "--lr_schedule=constant"}),
      0);
  int64_t acknowledged = 0;
  for (int r = 0; r < 32; ++r) {
    acknowledged += StepLines(absl::StrCat(dir, "/worker-", r, ".jsonl")).size();
  }
  const std::string summary = ReadAll(dir + "/summary.json");
  // Each step is one push per shard, and under ASP every accepted push is one update.
  EXPECT_EQ(Field(summary, "pushes_accepted"), 2 * acknowledged);
  EXPECT_EQ(Field(summary, "pushes_duplicate"), 0);
  EXPECT_EQ(Field(summary, "gradients_applied"), 2 * acknowledged);
  EXPECT_GT(acknowledged, 1000);
  const double wall = Field(summary, "wall_seconds");
  // Workers train 60 s each, after start-ups that overlap; the wall time includes those.
  std::printf(
      "load: %lld steps, %lld pushes in %.1f s wall: %.0f pushes/s (%.0f per training second)\n",
      static_cast<long long>(acknowledged), static_cast<long long>(2 * acknowledged), wall,
      2 * acknowledged / wall, 2 * acknowledged / 60.0);
  EXPECT_TRUE(ProcessesMentioning(dir).empty());
}

}  // namespace
}  // namespace ps::e2e
