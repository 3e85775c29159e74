// The planted click model: its files parse as Criteo data, are fixed by the seed, its truth
// matches the labels written, and a file is whole or absent.

#include "common/data/ctr_generator.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/data/ctr_dataset.h"
#include "gtest/gtest.h"
#include "tests/support/scratch_dir.h"

namespace ps {
namespace {

using CtrGenerator = ScratchDirTest;

TEST_F(CtrGenerator, WritesParsableLinesWhoseLabelsMatchTheTruth) {
  const PlantedCtrModel model(3);
  const std::string path = dir_ + "/train.tsv";
  absl::StatusOr<CtrSplitTruth> truth = WriteCtrSplit(model, 3, 0, 20000, path);
  ASSERT_TRUE(truth.ok()) << truth.status();
  absl::StatusOr<CtrDataset> data = LoadCtrFile(path, {});
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->size(), 20000);
  EXPECT_EQ(truth->lines, 20000);
  std::vector<int32_t> labels(20000), index(20000);
  for (int32_t i = 0; i < 20000; ++i) index[i] = i;
  std::vector<float> x(20000 * kCtrDenseFields);
  data->Gather(index.data(), 20000, x.data(), labels.data());
  int64_t clicks = 0;
  for (int32_t y : labels) clicks += y;
  EXPECT_DOUBLE_EQ(truth->click_rate, clicks / 20000.0);
  // The planted model is built to be learnable but far from certain, as click logs are.
  EXPECT_GT(truth->click_rate, 0.15);
  EXPECT_LT(truth->click_rate, 0.4);
  EXPECT_GT(truth->bayes_auc, 0.7);
  EXPECT_LT(truth->bayes_auc, 0.9);
  EXPECT_GT(truth->bayes_logloss, 0.3);
}

TEST_F(CtrGenerator, TheSeedFixesTheFilesAndStreamsDiffer) {
  const PlantedCtrModel model(5);
  ASSERT_TRUE(WriteCtrSplit(model, 5, 0, 500, dir_ + "/a.tsv").ok());
  ASSERT_TRUE(WriteCtrSplit(PlantedCtrModel(5), 5, 0, 500, dir_ + "/b.tsv").ok());
  ASSERT_TRUE(WriteCtrSplit(model, 5, 1, 500, dir_ + "/c.tsv").ok());
  ASSERT_TRUE(WriteCtrSplit(PlantedCtrModel(6), 6, 0, 500, dir_ + "/d.tsv").ok());
  EXPECT_EQ(Read(dir_ + "/a.tsv"), Read(dir_ + "/b.tsv"));
  EXPECT_NE(Read(dir_ + "/a.tsv"), Read(dir_ + "/c.tsv"));
  EXPECT_NE(Read(dir_ + "/a.tsv"), Read(dir_ + "/d.tsv"));
  EXPECT_EQ(WriteCtrSplit(model, 5, 0, 0, dir_ + "/e.tsv").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteCtrSplit(model, 5, 0, 10, dir_ + "/no/such/dir/f.tsv").status().code(),
            absl::StatusCode::kPermissionDenied);
}

// A write that fails midway (here: a file size limit of 4 KiB, in a child process) leaves no
// file at the path that a reader would take for the whole split, and removes its partial file.
TEST_F(CtrGenerator, AWriteCutShortLeavesNoFileAtThePath) {
  const std::string path = dir_ + "/cut.tsv";
  ASSERT_EQ(CodeUnderFileSizeLimit([&] {
              return WriteCtrSplit(PlantedCtrModel(5), 5, 0, 1000, path).status().code();
            }),
            absl::StatusCode::kDataLoss);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
}

// A stopped write (the flag ps_datagen sets on SIGINT and SIGTERM) is CANCELLED and leaves
// nothing; one that a killed process left behind is replaced by the next write.
TEST_F(CtrGenerator, AStoppedWriteLeavesNothingAndALeftPartialFileIsReplaced) {
  const std::string path = dir_ + "/stopped.tsv";
  const std::atomic<bool> stop{true};
  EXPECT_EQ(WriteCtrSplit(PlantedCtrModel(5), 5, 0, 1000, path, &stop).status().code(),
            absl::StatusCode::kCancelled);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));

  std::ofstream(path + ".partial") << "0\t1\n";  // what a SIGKILL midway leaves
  const std::atomic<bool> go_on{false};
  ASSERT_TRUE(WriteCtrSplit(PlantedCtrModel(5), 5, 0, 1000, path, &go_on).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
  absl::StatusOr<CtrDataset> data = LoadCtrFile(path, {});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->size(), 1000);
}

TEST_F(CtrGenerator, VocabulariesGrowFromFieldToField) {
  const PlantedCtrModel model(1);
  EXPECT_EQ(model.vocabulary(0), 4);
  EXPECT_GT(model.vocabulary(25), 90000);
  for (int f = 1; f < kCtrCategoricalFields; ++f) {
    EXPECT_GE(model.vocabulary(f), model.vocabulary(f - 1));
  }
}

}  // namespace
}  // namespace ps
