// The character-level corpus: UTF-8 decoding and its refusals, the sorted vocabulary, the 90/10
// split, windows and their next-character labels, and the registry's `text:FILE`.

#include "common/data/text_dataset.h"

#include <string>
#include <vector>

#include "common/data/data_registry.h"
#include "gtest/gtest.h"
#include "tests/support/scratch_dir.h"

namespace ps {
namespace {

// Each test's files live in its own scratch folder, removed when the test ends.
class TextFile : public ScratchDirTest {};

TEST(Utf8, DecodesAndEncodesEveryWidthAndRefusesMalformedBytes) {
  const std::string text = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";  // a, é, €, 😀
  const auto cps = DecodeUtf8(text);
  ASSERT_TRUE(cps.ok());
  EXPECT_EQ(*cps, (std::vector<uint32_t>{0x61, 0xe9, 0x20ac, 0x1f600}));
  std::string back;
  for (uint32_t c : *cps) AppendUtf8(c, &back);
  EXPECT_EQ(back, text);
  for (const std::string& bad : {std::string("ab\xff"), std::string("\xc3"),  // cut short
                                 std::string("\xc0\xaf"),                     // overlong '/'
                                 std::string("\xed\xa0\x80"),                 // a surrogate
                                 std::string("x\x80")}) {
    const auto r = DecodeUtf8(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << bad;
  }
  EXPECT_NE(DecodeUtf8("ab\xff").status().message().find("byte 2"), std::string::npos);
}

TEST_F(TextFile, SplitsNinetyTenWithWindowsAndNextCharacterLabels) {
  // 20 characters: the first 18 train, the last 2 validate.
  const std::string path = Write("split", "abcabcabcabcabcabczz");
  auto train = TextDataset::Load(path, /*train=*/true, /*context=*/4);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->vocabulary(), (std::vector<uint32_t>{'a', 'b', 'c', 'z'}));
  EXPECT_EQ(train->tokens(), 18);
  EXPECT_EQ(train->size(), 18 - 4);  // a window at every start that has a next character
  const SampleShape shape = train->shape();
  EXPECT_EQ(shape.features, 4);
  EXPECT_EQ(shape.labels, 4);
  EXPECT_EQ(shape.num_classes, 4);
  const std::vector<int32_t> idx = {1, 13};
  std::vector<float> x(8);
  std::vector<int32_t> y(8);
  train->Gather(idx.data(), 2, x.data(), y.data());
  EXPECT_EQ(x, (std::vector<float>{1, 2, 0, 1, 1, 2, 0, 1}));  // "bcab" at 1 and at 13
  EXPECT_EQ(y, (std::vector<int32_t>{2, 0, 1, 2, 2, 0, 1, 2}));
  // The validation split is too short for a window of 4 plus its label.
  EXPECT_EQ(TextDataset::Load(path, /*train=*/false, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto val = TextDataset::Load(path, /*train=*/false, 1);
  ASSERT_TRUE(val.ok());
  EXPECT_EQ(val->tokens(), 2);
  EXPECT_EQ(val->vocabulary(), train->vocabulary());  // the whole file's
  EXPECT_EQ(val->vocabulary_fingerprint(), train->vocabulary_fingerprint());
}

TEST_F(TextFile, ValidationWindowsDoNotOverlap) {
  std::string text(100, 'a');
  for (int i = 90; i < 100; ++i) text[i] = static_cast<char>('a' + (i - 90));  // "abcdefghij"
  const std::string path = Write("val", text);
  auto val = TextDataset::Load(path, /*train=*/false, 3);
  ASSERT_TRUE(val.ok());
  EXPECT_EQ(val->size(), 3);  // (10 - 1) / 3: starts 0, 3, 6
  const std::vector<int32_t> idx = {0, 1, 2};
  std::vector<float> x(9);
  std::vector<int32_t> y(9);
  val->Gather(idx.data(), 3, x.data(), y.data());
  EXPECT_EQ(x, (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(y, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  val->Truncate(2);
  EXPECT_EQ(val->size(), 2);
}

TEST_F(TextFile, EncodesAndDecodesAndNamesCharactersOutsideTheVocabulary) {
  const std::string path = Write("enc", "h\xc3\xa9llo world, h\xc3\xa9llo");
  auto data = TextDataset::Load(path, true, 2);
  ASSERT_TRUE(data.ok());
  auto ids = data->Encode("h\xc3\xa9llo");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(data->Decode(*ids), "h\xc3\xa9llo");
  auto bad = data->Encode("hx");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'x'"), std::string::npos) << bad.status();
}

TEST_F(TextFile, TheRegistryOpensTextFilesAndExplainsWhatIsMissing) {
  const std::string path = Write("reg", std::string(200, 'q') + "rs");
  auto spec = ParseDataSpec("text:" + path);
  ASSERT_TRUE(spec.ok());
  auto opened = OpenDataset(*spec, Split::kTrain, DataOptions{0, false, 8});
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->shape().labels, 8);
  EXPECT_EQ(OpenDataset(*spec, Split::kTrain).status().code(),
            absl::StatusCode::kInvalidArgument);  // no --context
  auto missing = ParseDataSpec("text:/nonexistent/corpus.txt");
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(OpenDataset(*missing, Split::kTrain, DataOptions{0, false, 8}).status().code(),
            absl::StatusCode::kNotFound);
  const std::string not_utf8 = Write("bad", std::string(50, 'a') + "\xfe" + "bb");
  auto bad = OpenDataset(*ParseDataSpec("text:" + not_utf8), Split::kTrain, {0, false, 4});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("byte 50"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace ps
