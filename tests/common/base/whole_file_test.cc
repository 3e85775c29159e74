#include "common/base/whole_file.h"

#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/scratch_dir.h"

namespace ps {
namespace {

using WholeFile = ScratchDirTest;

TEST_F(WholeFile, WritesTheBytesAndReplacesWhatWasThere) {
  const std::string path = Path("port");
  ASSERT_TRUE(WriteWholeFile(path, "5000\n").ok());
  EXPECT_EQ(Read(path), "5000\n");
  const std::string binary("a\0b\n", 4);
  ASSERT_TRUE(WriteWholeFile(path, binary).ok());
  EXPECT_EQ(Read(path), binary);
  ASSERT_TRUE(WriteWholeFile(path, "").ok());
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_EQ(std::filesystem::file_size(path), 0u);
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
}

TEST_F(WholeFile, AMissingFolderIsPermissionDeniedAndCreatesNothing) {
  const absl::Status s = WriteWholeFile(Path("no/such/folder/summary.json"), "{}");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("no/such/folder/summary.json.partial"), std::string::npos) << s;
  EXPECT_FALSE(std::filesystem::exists(Path("no")));
}

// A write that fails midway (a file size limit of 4 KiB, in a child process) is DATA_LOSS, leaves
// what the path held before, and removes its partial file.
TEST_F(WholeFile, AWriteCutShortLeavesThePathAsItWas) {
  const std::string path = Path("weights.f32");
  ASSERT_TRUE(WriteWholeFile(path, "before").ok());
  ASSERT_EQ(CodeUnderFileSizeLimit(
                [&] { return WriteWholeFile(path, std::string(1 << 20, 'x')).code(); }),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(Read(path), "before");
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
}

}  // namespace
}  // namespace ps
