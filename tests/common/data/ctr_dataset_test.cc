// The Criteo-format reader: one line's fields and keys, its errors by field, files plain and
// gzip-compressed, lines across read blocks, skipping bad lines, limits and the registry.

#include "common/data/ctr_dataset.h"

#include <cmath>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/data/data_registry.h"
#include "gtest/gtest.h"
#include "tests/support/scratch_dir.h"

namespace ps {
namespace {

// A line with label `label`, counts 0..12 (I4 empty, I2 -3) and values "a0".."a25" (C5 empty).
std::string Line(int label, int salt = 0) {
  std::vector<std::string> fields = {std::to_string(label)};
  for (int i = 0; i < kCtrDenseFields; ++i) fields.push_back(std::to_string(i + salt));
  fields[4] = "";
  fields[2] = "-3";
  for (int c = 0; c < kCtrCategoricalFields; ++c) fields.push_back(absl::StrCat("a", c + salt));
  fields[1 + kCtrDenseFields + 4] = "";
  return absl::StrJoin(fields, "\t");
}

TEST(CriteoLine, ParsesLabelCountsAndKeys) {
  CtrSample s;
  ASSERT_TRUE(ParseCriteoLine(Line(1), &s).ok());
  EXPECT_EQ(s.label, 1);
  for (int i = 0; i < kCtrDenseFields; ++i) {
    const float count = i == 3 ? 0.0f : i == 1 ? 0.0f : static_cast<float>(i);  // empty, -3
    EXPECT_EQ(s.dense[i], std::log1p(count)) << i;
  }
  for (int c = 0; c < kCtrCategoricalFields; ++c) {
    const uint64_t expected =
        c == 4 ? CategoricalKey(c, 0, /*empty=*/true)
               : CategoricalKey(c, std::stoull(absl::StrCat("a", c), nullptr, 16), false);
    EXPECT_EQ(s.keys[c], expected) << c;
  }
  ASSERT_TRUE(ParseCriteoLine(Line(0), &s).ok());
  EXPECT_EQ(s.label, 0);
}

TEST(CriteoLine, KeysDifferAcrossFieldsAndFromTheEmptyValue) {
  std::set<uint64_t> keys;
  for (int field = 0; field < kCtrCategoricalFields; ++field) {
    keys.insert(CategoricalKey(field, 0, false));
    keys.insert(CategoricalKey(field, 0, true));
    keys.insert(CategoricalKey(field, 1, false));
  }
  EXPECT_EQ(keys.size(), 3u * kCtrCategoricalFields);
  // The empty value's key ignores the value argument.
  EXPECT_EQ(CategoricalKey(3, 0, true), CategoricalKey(3, 77, true));
}

TEST(CriteoLine, ErrorsNameTheField) {
  CtrSample s;
  auto error = [&s](const std::string& line) {
    const absl::Status status = ParseCriteoLine(line, &s);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << line;
    return std::string(status.message());
  };
  std::string bad = Line(1);
  bad[0] = '2';
  EXPECT_EQ(error(bad), "label: '2' is not 0 or 1");
  std::vector<std::string> f = absl::StrSplit(Line(1), '\t');
  f[3] = "1x";
  EXPECT_EQ(error(absl::StrJoin(f, "\t")), "I3: '1x' is not an integer");
  f = absl::StrSplit(Line(1), '\t');
  f[1 + kCtrDenseFields + 6] = "zz";
  EXPECT_EQ(error(absl::StrJoin(f, "\t")), "C7: 'zz' is not hexadecimal of at most 16 digits");
  f[1 + kCtrDenseFields + 6] = "11112222333344445";
  EXPECT_EQ(error(absl::StrJoin(f, "\t")),
            "C7: '11112222333344445' is not hexadecimal of at most 16 digits");
  f = absl::StrSplit(Line(1), '\t');
  f.pop_back();
  EXPECT_EQ(error(absl::StrJoin(f, "\t")), "40 tab-separated fields expected, got 39");
  EXPECT_EQ(error(Line(1) + "\t7"), "40 tab-separated fields expected, got more");
  EXPECT_EQ(error(""), "label: '' is not 0 or 1");
}

class CtrFiles : public ScratchDirTest {};

TEST_F(CtrFiles, PlainAndGzipFilesGiveTheSameSamples) {
  // CRLF endings and a last line without a newline are read too.
  const std::string text = Line(1, 0) + "\r\n" + Line(0, 1) + "\n" + Line(1, 2);
  Write("train.tsv", text);
  WriteGz("test.tsv.gz", text);
  absl::StatusOr<CtrDataset> plain = LoadCriteo(dir_, "train", {});
  absl::StatusOr<CtrDataset> gz = LoadCriteo(dir_, "test", {});
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(gz.ok()) << gz.status();
  ASSERT_EQ(plain->size(), 3);
  ASSERT_EQ(gz->size(), 3);
  const int32_t order[3] = {2, 0, 1};
  std::vector<float> x(3 * kCtrDenseFields), gx(x.size());
  std::vector<int32_t> y(3), gy(3);
  std::vector<uint64_t> keys(3 * kCtrCategoricalFields), gkeys(keys.size());
  plain->Gather(order, 3, x.data(), y.data());
  plain->GatherKeys(order, 3, keys.data());
  gz->Gather(order, 3, gx.data(), gy.data());
  gz->GatherKeys(order, 3, gkeys.data());
  EXPECT_EQ(y, (std::vector<int32_t>{1, 1, 0}));
  EXPECT_EQ(y, gy);
  EXPECT_EQ(x, gx);
  EXPECT_EQ(keys, gkeys);
  CtrSample third;
  ASSERT_TRUE(ParseCriteoLine(Line(1, 2), &third).ok());
  for (int c = 0; c < kCtrCategoricalFields; ++c) EXPECT_EQ(keys[c], third.keys[c]);
  for (int i = 0; i < kCtrDenseFields; ++i) EXPECT_EQ(x[i], third.dense[i]);
}

TEST_F(CtrFiles, LinesAcrossReadBlocksAndLimits) {
  // About 3 MiB: lines straddle the reader's 1 MiB blocks.
  std::string text;
  const int lines = 20000;
  for (int i = 0; i < lines; ++i) absl::StrAppend(&text, Line(i % 2, i % 7), "\n");
  WriteGz("train.tsv.gz", text);
  absl::StatusOr<CtrDataset> all = LoadCriteo(dir_, "train", {});
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), lines);
  std::vector<float> x(kCtrDenseFields);
  int32_t y = -1;
  for (int32_t i : {0, 4999, 12345, lines - 1}) {
    all->Gather(&i, 1, x.data(), &y);
    EXPECT_EQ(y, i % 2);
    EXPECT_EQ(x[5], std::log1p(static_cast<float>(5 + i % 7))) << i;
  }
  absl::StatusOr<CtrDataset> some = LoadCriteo(dir_, "train", {/*limit=*/123, false});
  ASSERT_TRUE(some.ok());
  EXPECT_EQ(some->size(), 123);
}

TEST_F(CtrFiles, ABadLineFailsNamingFileLineAndFieldOrIsSkippedAndCounted) {
  std::vector<std::string> f = absl::StrSplit(Line(1), '\t');
  f[1 + kCtrDenseFields + 2] = "q";
  Write("train.tsv", Line(0) + "\n" + absl::StrJoin(f, "\t") + "\n" + Line(1) + "\n\n");
  const absl::Status strict = LoadCriteo(dir_, "train", {}).status();
  EXPECT_EQ(strict.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StartsWith(
      strict.message(), Path("train.tsv") + ":2: C3: 'q' is not hexadecimal of at most 16 digits"))
      << strict;
  absl::StatusOr<CtrDataset> lenient = LoadCriteo(dir_, "train", {0, /*skip_bad_lines=*/true});
  ASSERT_TRUE(lenient.ok()) << lenient.status();
  EXPECT_EQ(lenient->size(), 2);
  EXPECT_EQ(lenient->skipped_lines(), 2);  // line 2 and the empty line 4
  EXPECT_TRUE(absl::StrContains(lenient->first_skipped(), ":2: C3:")) << lenient->first_skipped();
}

TEST_F(CtrFiles, MissingEmptyAndCorruptFiles) {
  const absl::Status missing = LoadCriteo(dir_, "test", {}).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.message(), "test.tsv nor")) << missing;
  Write("train.tsv", "");
  EXPECT_EQ(LoadCriteo(dir_, "train", {}).status().code(), absl::StatusCode::kDataLoss);
  // A gzip stream cut short: its data is corrupt, not merely ended.
  std::string text;
  for (int i = 0; i < 2000; ++i) absl::StrAppend(&text, Line(1, i), "\n");
  WriteGz("whole.tsv.gz", text);
  std::ifstream in(Path("whole.tsv.gz"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Write("test.tsv.gz", bytes.substr(0, bytes.size() / 2));
  const absl::Status cut = LoadCriteo(dir_, "test", {}).status();
  EXPECT_EQ(cut.code(), absl::StatusCode::kDataLoss) << cut;
}

TEST_F(CtrFiles, TheRegistryOpensCriteoFoldersWithTheirOptions) {
  Write("train.tsv", Line(1) + "\n" + Line(0) + "\nbad\n" + Line(1) + "\n");
  absl::StatusOr<DataSpec> spec = ParseDataSpec("criteo:" + dir_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(OpenDataset(*spec, Split::kTrain).status().code(), absl::StatusCode::kDataLoss);
  auto data = OpenDataset(*spec, Split::kTrain, {/*limit=*/0, /*skip_bad_lines=*/true});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ((*data)->size(), 3);
  EXPECT_EQ((*data)->keys_per_sample(), kCtrCategoricalFields);
  EXPECT_EQ((*data)->shape().features, kCtrDenseFields);
  EXPECT_EQ((*data)->shape().num_classes, 2);
  auto two = OpenDataset(*spec, Split::kTrain, {/*limit=*/2, false});
  ASSERT_TRUE(two.ok()) << two.status();  // the bad third line is never read
  EXPECT_EQ((*two)->size(), 2);
}

}  // namespace
}  // namespace ps
