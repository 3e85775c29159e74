#ifndef PS_TESTS_SUPPORT_SCRATCH_DIR_H_
#define PS_TESTS_SUPPORT_SCRATCH_DIR_H_

// A fixture for tests that write files: each test gets a fresh, empty folder of its own
// (testing::TempDir()/ps_<pid>_<suite>_<test>, so parallel test binaries and tests never share
// one), removed with everything in it when the test ends, passed or failed.

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace ps {

class ScratchDirTest : public testing::Test {
 protected:
  void SetUp() override {
    const testing::TestInfo* test = testing::UnitTest::GetInstance()->current_test_info();
    dir_ = testing::TempDir() + "/ps_" + std::to_string(getpid()) + "_" + test->test_suite_name() +
           "_" + test->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  // Writes `bytes` to Path(name) as they are; returns that path.
  std::string Write(const std::string& name, const std::string& bytes) const {
    WriteFile(Path(name), bytes);
    return Path(name);
  }
  // Replaces the file at `path` (anywhere) with `bytes`.
  static void WriteFile(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  // Writes `bytes` (a std::string or std::vector<uint8_t>) to Path(name) gzip-compressed.
  template <typename Bytes>
  void WriteGz(const std::string& name, const Bytes& bytes) const {
    gzFile f = gzopen(Path(name).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
    ASSERT_EQ(gzclose(f), Z_OK);
  }
  // The bytes of the file at `path` (empty when it cannot be read).
  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // Runs `write` in a child process whose files cannot grow past 4 KiB (a write past it fails
  // with EFBIG, as on a full disk) and gives the status code it returned; UNKNOWN when the child
  // did not exit normally.
  static absl::StatusCode CodeUnderFileSizeLimit(const std::function<absl::StatusCode()>& write) {
    const pid_t child = fork();
    if (child < 0) return absl::StatusCode::kUnknown;
    if (child == 0) {
      std::signal(SIGXFSZ, SIG_IGN);  // else the write past the limit kills the child
      const rlimit limit = {4096, 4096};
      setrlimit(RLIMIT_FSIZE, &limit);
      _exit(static_cast<int>(write()));
    }
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status)) {
      return absl::StatusCode::kUnknown;
    }
    return static_cast<absl::StatusCode>(WEXITSTATUS(status));
  }

  std::string dir_;
};

}  // namespace ps

#endif  // PS_TESTS_SUPPORT_SCRATCH_DIR_H_
