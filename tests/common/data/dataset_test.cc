// The IDX loader on small generated files: valid, truncated, corrupt, wrong magic, missing.

#include "common/data/dataset.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/data/data_registry.h"
#include "gtest/gtest.h"
#include "tests/support/scratch_dir.h"

namespace ps {
namespace {

std::vector<uint8_t> Header(uint32_t magic, const std::vector<uint32_t>& dims) {
  std::vector<uint8_t> out;
  auto put = [&out](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  return out;
}

class IdxFiles : public ScratchDirTest {
 protected:
  // Three 2x2 images with pixel values 0..11 and labels 7, 0, 9.
  void WriteValid(const std::string& prefix) {
    std::vector<uint8_t> images = Header(0x803, {3, 2, 2});
    for (int i = 0; i < 12; ++i) images.push_back(static_cast<uint8_t>(i));
    WriteGz(prefix + "-images-idx3-ubyte.gz", images);
    std::vector<uint8_t> labels = Header(0x801, {3});
    labels.insert(labels.end(), {7, 0, 9});
    WriteGz(prefix + "-labels-idx1-ubyte.gz", labels);
  }
};

TEST_F(IdxFiles, LoadsValidFiles) {
  WriteValid("train");
  auto ds = LoadFashionMnist(dir_, "train");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->size(), 3);
  EXPECT_EQ(ds->rows, 2);
  EXPECT_EQ(ds->cols, 2);
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{7, 0, 9}));
  EXPECT_EQ(ds->pixels[5], 5);
  // Gather normalises pixels: (p / 255 - 0.2860) / 0.3530.
  const int32_t idx[] = {1};
  float x[4];
  int32_t y = -1;
  ds->Gather(idx, 1, x, &y);
  EXPECT_EQ(y, 0);
  EXPECT_NEAR(x[0], (4 / 255.0 - 0.2860) / 0.3530, 1e-5);
}

TEST_F(IdxFiles, TruncatedDataIsDataLoss) {
  std::vector<uint8_t> images = Header(0x803, {3, 2, 2});
  for (int i = 0; i < 10; ++i) images.push_back(1);  // two bytes short
  WriteGz("img.gz", images);
  auto r = ReadIdxFile(Path("img.gz"), 0x803);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status();
}

TEST_F(IdxFiles, TruncatedGzipStreamIsDataLoss) {
  WriteValid("train");
  const std::string path = Path("train-images-idx3-ubyte.gz");
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 12);  // cut into the stream and its trailer
  EXPECT_EQ(LoadFashionMnist(dir_, "train").status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(IdxFiles, CorruptGzipIsDataLoss) {
  WriteValid("train");
  const std::string path = Path("train-images-idx3-ubyte.gz");
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(12);
  const char garbage[8] = {'\xff', '\x00', '\xff', '\x13', '\x37', '\x00', '\xff', '\x01'};
  f.write(garbage, sizeof(garbage));
  f.close();
  EXPECT_EQ(LoadFashionMnist(dir_, "train").status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(IdxFiles, WrongMagicIsDataLoss) {
  std::vector<uint8_t> labels = Header(0x803, {1, 1, 1});
  labels.push_back(0);
  WriteGz("lab.gz", labels);
  auto r = ReadIdxFile(Path("lab.gz"), 0x801);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("magic"), std::string::npos) << r.status();
}

TEST_F(IdxFiles, TrailingBytesAreDataLoss) {
  std::vector<uint8_t> labels = Header(0x801, {2});
  labels.insert(labels.end(), {1, 2, 3});
  WriteGz("lab.gz", labels);
  EXPECT_EQ(ReadIdxFile(Path("lab.gz"), 0x801).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(IdxFiles, MissingFileIsNotFound) {
  EXPECT_EQ(LoadFashionMnist(dir_, "test").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(IdxFiles, CountMismatchAndBadLabelsAreDataLoss) {
  WriteValid("train");
  std::vector<uint8_t> labels = Header(0x801, {2});
  labels.insert(labels.end(), {1, 2});
  WriteGz("train-labels-idx1-ubyte.gz", labels);
  EXPECT_EQ(LoadFashionMnist(dir_, "train").status().code(), absl::StatusCode::kDataLoss);
  labels = Header(0x801, {3});
  labels.insert(labels.end(), {1, 12, 2});
  WriteGz("train-labels-idx1-ubyte.gz", labels);
  EXPECT_EQ(LoadFashionMnist(dir_, "train").status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(IdxFiles, UnknownSplitIsInvalidArgument) {
  EXPECT_EQ(LoadFashionMnist(dir_, "validation").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(IdxFiles, TruncateKeepsThePrefix) {
  WriteValid("train");
  auto ds = LoadFashionMnist(dir_, "train");
  ASSERT_TRUE(ds.ok());
  ds->Truncate(2);
  EXPECT_EQ(ds->size(), 2);
  EXPECT_EQ(ds->pixels.size(), 8u);
}

// --data KIND[:PATH]: the kind is checked against the registry, PATH is optional.
TEST(DataSpec, ParsesKindAndPathAndRefusesUnknownKinds) {
  auto plain = ParseDataSpec("fashion-mnist");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->kind, "fashion-mnist");
  EXPECT_EQ(plain->path, "");
  auto with_path = ParseDataSpec("fashion-mnist:/data/fm:x");
  ASSERT_TRUE(with_path.ok()) << with_path.status();
  EXPECT_EQ(with_path->path, "/data/fm:x");  // only the first ':' separates
  EXPECT_EQ(DataSpecText(*with_path), "fashion-mnist:/data/fm:x");
  const absl::Status unknown = ParseDataSpec("imagenet:/data").status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(unknown.message(), "fashion-mnist")) << unknown;
  EXPECT_EQ(ParseDataSpec("fashion-mnist:").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDataSpec("").status().code(), absl::StatusCode::kInvalidArgument);
}

// The registry opens a kind's split through the Dataset interface; the loader's errors (a missing
// folder: NOT_FOUND naming the file) come through unchanged.
TEST_F(IdxFiles, OpenDatasetLoadsThroughTheRegistry) {
  WriteValid("train");
  auto data = OpenDataset(DataSpec{"fashion-mnist", dir_}, Split::kTrain);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ((*data)->size(), 3);
  EXPECT_EQ((*data)->shape().features, 4);
  EXPECT_EQ((*data)->shape().num_classes, 10);
  EXPECT_EQ((*data)->shape().image.height, 2);
  const absl::Status missing = OpenDataset(DataSpec{"fashion-mnist", dir_}, Split::kTest).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.message(), "t10k")) << missing;
}

}  // namespace
}  // namespace ps
