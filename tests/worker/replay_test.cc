// Replay's handling of bad update records (the bit-for-bit replay of a real run is an
// end-to-end test: tests/e2e/launch_e2e_test.cc).

#include "worker/replay.h"

#include "common/device/cpu_device.h"
#include "common/nn/model_registry.h"
#include "gtest/gtest.h"
#include "tests/support/scratch_dir.h"

namespace ps {
namespace {

ImageDataset TinyData() {
  ImageDataset d;
  d.rows = 2;
  d.cols = 2;
  d.num_classes = 2;
  for (int i = 0; i < 8; ++i) {
    for (int p = 0; p < 4; ++p) d.pixels.push_back(static_cast<uint8_t>(i * 30 + p));
    d.labels.push_back(i % 2);
  }
  return d;
}

// Each test's records live in its own scratch folder, removed when the test ends.
class ReplayRecords : public ScratchDirTest {};

absl::Status RunReplay(const std::vector<std::string>& records, int64_t* updates = nullptr) {
  CpuDevice dev;
  const ImageDataset data = TinyData();
  auto model = MakeMlp(4, {3}, 2, dev, 2);
  EXPECT_TRUE(model.ok());
  ReplayOptions o;
  o.record_paths = records;
  o.num_workers = 2;
  o.batch_size = 2;
  auto r = Replay(o, **model, dev, data);
  if (r.ok() && updates != nullptr) *updates = r->updates;
  return r.status();
}

TEST_F(ReplayRecords, ConsistentRecordsReplay) {
  // Two workers, one shard: worker 1's first gradient was computed before worker 0's applied.
  const std::string rec = Write("ok.updates", "0 0 0 0 0\n1 1 0 0 1\n2 0 1 1 1\n");
  int64_t updates = 0;
  ASSERT_TRUE(RunReplay({rec}, &updates).ok());
  EXPECT_EQ(updates, 3);
}

TEST_F(ReplayRecords, BadRecordsAreDataLoss) {
  EXPECT_EQ(RunReplay({Write("garbage.updates", "0 0 zero\n")}).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(RunReplay({Write("gap.updates", "0 0 0 0 0\n2 1 0 0 2\n")}).code(),
            absl::StatusCode::kDataLoss);  // versions must follow each other
  // A gradient one shard applied and the other never saw (a dropped gradient).
  EXPECT_EQ(RunReplay({Write("a.updates", "0 0 0 0 0\n"), Write("b.updates", "")}).code(),
            absl::StatusCode::kDataLoss);
  // A base version the shard never reaches.
  EXPECT_EQ(RunReplay({Write("future.updates", "0 0 0 5 0\n")}).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(RunReplay({Path("missing.updates")}).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(RunReplay({}).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
