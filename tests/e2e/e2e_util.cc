#include "tests/e2e/e2e_util.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/data/dataset.h"
#include "gtest/gtest.h"

extern char** environ;

namespace ps::e2e {

std::string BinDir() {
  const char* d = std::getenv("PS_BIN_DIR");
  return d != nullptr ? d : "bin";
}

std::string DataDir() {
  const char* d = std::getenv("PS_DATA_DIR");
  return d != nullptr ? d : ps::kDefaultFashionMnistDir;
}

namespace {

// The folders RunDir made in this process.
std::vector<std::string>& MadeRunDirs() {
  static auto* dirs = new std::vector<std::string>;
  return *dirs;
}

// After the last test: the run folders go when every test passed, and are named when one failed
// (their logs are what a reader needs then).
class RunDirsAtExit : public testing::Environment {
 public:
  void TearDown() override {
    const bool passed = testing::UnitTest::GetInstance()->Passed();
    for (const std::string& dir : MadeRunDirs()) {
      if (passed) {
        std::error_code ignored;
        std::filesystem::remove_all(dir, ignored);
      } else {
        std::cerr << "kept for inspection: " << dir << "\n";
      }
    }
  }
};
testing::Environment* const kRunDirsAtExit = testing::AddGlobalTestEnvironment(new RunDirsAtExit);

}  // namespace

std::string RunDir(const std::string& name) {
  const std::string dir = absl::StrCat(testing::TempDir(), "/ps_e2e_", getpid(), "_", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  MadeRunDirs().push_back(dir);
  return dir;
}

// Starts args[0] with args, its stdout and stderr going to the file `log`.
pid_t Spawn(std::vector<std::string> args, const std::string& log) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  EXPECT_EQ(rc, 0) << "cannot start " << argv[0];
  return pid;
}

int Signal(pid_t pid, int sig) {
  if (pid <= 0) {
    ADD_FAILURE() << "no process to signal (pid " << pid << ")";
    return -1;
  }
  return kill(pid, sig);
}

int WaitExit(pid_t pid) {
  if (pid <= 0) return -1;  // never waitpid(-1): that would reap any child
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Runs args to completion with its output in `log`; returns the exit code.
int RunTool(const std::vector<std::string>& args, const std::string& log) {
  return WaitExit(Spawn(args, log));
}

// Starts ps_launch with `args`, its output going to <dir>/launch.log.
pid_t StartLaunch(const std::string& dir, std::vector<std::string> args, bool quiet) {
  args.insert(args.begin(), BinDir() + "/ps_launch");
  args.push_back("--metrics_dir=" + dir);
  if (quiet) args.push_back("--quiet");
  return Spawn(args, dir + "/launch.log");
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int RunLaunch(const std::string& dir, const std::vector<std::string>& args, bool quiet) {
  const int code = WaitExit(StartLaunch(dir, args, quiet));
  if (code != 0)
    ADD_FAILURE() << "ps_launch exited " << code << ":\n" << ReadAll(dir + "/launch.log");
  return code;
}

// The number after "key": in a flat JSON line; NaN when absent.
double Field(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  const size_t at = line.find(k);
  if (at == std::string::npos) return std::nan("");
  const size_t begin = at + k.size();
  double v = 0;
  if (!absl::SimpleAtod(line.substr(begin, line.find_first_of(",}", begin) - begin), &v)) {
    return std::nan("");
  }
  return v;
}

std::vector<std::string> LinesOfKind(const std::string& path, const std::string& kind) {
  std::ifstream in(path);
  std::vector<std::string> out;
  const std::string marker = "\"kind\":\"" + kind + "\"";
  for (std::string line; std::getline(in, line);) {
    if (absl::StrContains(line, marker)) out.push_back(line);
  }
  return out;
}

bool WaitForSteps(const std::string& path, size_t steps, double timeout_s) {
  const absl::Time deadline = absl::Now() + absl::Seconds(timeout_s);
  while (StepLines(path).size() < steps) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return true;
}

namespace {

// Waits up to `timeout_s` until a server has written its port to `port_file` (--port_file): the
// port, or 0 when none came.
int WaitForPort(const std::string& port_file, double timeout_s) {
  const absl::Time deadline = absl::Now() + absl::Seconds(timeout_s);
  int port = 0;
  while (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadAll(port_file)), &port) || port <= 0) {
    if (absl::Now() > deadline) return 0;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return port;
}

}  // namespace

TestServer StartServer(const std::string& dir, const std::string& name,
                       const std::vector<std::string>& flags) {
  TestServer server;
  server.log = dir + "/" + name + ".log";
  const std::string port_file = dir + "/" + name + ".port";
  std::vector<std::string> args = {BinDir() + "/ps_server", "--port_file=" + port_file};
  args.insert(args.end(), flags.begin(), flags.end());
  server.pid = Spawn(args, server.log);
  if (server.pid > 0) server.port = WaitForPort(port_file, 30);
  return server;
}

bool WaitForCheckpoint(const std::string& dir, double timeout_s) {
  const absl::Time deadline = absl::Now() + absl::Seconds(timeout_s);
  for (;;) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (absl::StartsWith(name, "ckpt-") && absl::EndsWith(name, ".ps")) return true;
    }
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

std::vector<float> ReadWeights(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> w(bytes.size() / sizeof(float));
  std::memcpy(w.data(), bytes.data(), w.size() * sizeof(float));
  return w;
}

// Processes whose command line mentions `marker` (our run folder): none may outlive a launch.
std::vector<std::string> ProcessesMentioning(const std::string& marker) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = entry.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = ReadAll(entry.path().string() + "/cmdline");
    for (char& c : cmdline) {
      if (c == '\0') c = ' ';
    }
    if (absl::StrContains(cmdline, marker)) found.push_back(pid + ": " + cmdline);
  }
  return found;
}

int RunWithShardKilled(const std::string& dir, int checkpoint_every, int steps,
                       const std::vector<std::string>& job) {
  const std::string checkpoints = dir + "/checkpoints";
  const pid_t launch =
      StartLaunch(dir,
                  With(job, {"--checkpoint_root=" + checkpoints,
                             "--checkpoint_every=" + std::to_string(checkpoint_every),
                             "--restart_shards", "--restart_delay_s=1"}),
                  /*quiet=*/false);
  EXPECT_TRUE(WaitForSteps(dir + "/worker-0.jsonl", steps, 120)) << ReadAll(dir + "/launch.log");
  // A checkpoint is written and synced behind the updates: at 80 steps (0.2 s into a run) the
  // folder once held only the first one's temporary file, which a restart rightly discards.
  EXPECT_TRUE(WaitForCheckpoint(checkpoints + "/ps-1", 60)) << ReadAll(dir + "/launch.log");
  EXPECT_EQ(Signal(static_cast<pid_t>(std::stol(ReadAll(dir + "/ps-1.pid"))), SIGKILL), 0);
  return WaitExit(launch);
}

int64_t RollbackVersionIn(const std::string& launch_log) {
  std::smatch m;
  if (!std::regex_search(
          launch_log, m,
          std::regex(R"(every shard goes back to its checkpoint of version (\d+))"))) {
    return -1;
  }
  return std::stoll(m[1]);
}

std::vector<std::string> Common(const std::string& train_limit) {
  return {"--data=fashion-mnist:" + DataDir(), "--train_limit=" + train_limit, "--test_limit=500",
          "--hidden=64,32", "--shards=2"};
}

std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace ps::e2e
