#include "common/base/json_lines.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/scratch_dir.h"

namespace ps {
namespace {

TEST(JsonObject, WritesFieldsInOrderWithEscapes) {
  JsonObject o;
  o.Add("name", "a\"b\\c\n").Add("n", int64_t{-3}).Add("x", 0.5).Add("ok", true);
  o.Add("v", std::vector<int64_t>{1, 2}).Add("nan", std::nan(""));
  EXPECT_EQ(o.str(), R"({"name":"a\"b\\c\n","n":-3,"x":0.5,"ok":true,"v":[1,2],"nan":null})");
}

TEST(JsonObject, WritesArraysOfObjects) {
  JsonObject o;
  o.Add("none", std::vector<JsonObject>{});
  o.Add("two", std::vector<JsonObject>{JsonObject().Add("rank", 1), JsonObject()});
  EXPECT_EQ(o.str(), R"({"none":[],"two":[{"rank":1},{}]})");
}

class JsonLinesFile : public ScratchDirTest {};

TEST_F(JsonLinesFile, AppendsOneLinePerObject) {
  const std::string path = Path("metrics.jsonl");
  {
    auto w = JsonLinesWriter::Open(path);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Write(JsonObject().Add("step", 1)).ok());
    ASSERT_TRUE((*w)->Write(JsonObject().Add("step", 2)).ok());
  }
  std::ifstream in(path);
  std::string a, b, c;
  std::getline(in, a);
  std::getline(in, b);
  EXPECT_EQ(a, R"({"step":1})");
  EXPECT_EQ(b, R"({"step":2})");
  EXPECT_FALSE(std::getline(in, c));
}

TEST(JsonLinesWriter, UnwritablePathIsAnError) {
  EXPECT_EQ(JsonLinesWriter::Open("/nonexistent-dir/x.jsonl").status().code(),
            absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace ps
