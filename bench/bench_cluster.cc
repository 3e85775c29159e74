#include "bench/bench_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "deploy/local/child_processes.h"
#include "spdlog/spdlog.h"

namespace ps::bench {

namespace {

std::string SelfDir() { return std::filesystem::read_symlink("/proc/self/exe").parent_path(); }

}  // namespace

ShardProcesses::ShardProcesses(int shards, const std::vector<std::string>& flags) {
  dir_ = std::filesystem::temp_directory_path() / absl::StrCat("ps_bench_shards.", getpid());
  std::filesystem::create_directories(dir_);
  std::vector<std::vector<std::string>> commands;
  std::vector<std::string> port_files;
  for (int s = 0; s < shards; ++s) {
    port_files.push_back(absl::StrCat(dir_, "/ps-", s, ".port"));
    commands.push_back({SelfDir() + "/ps_server", absl::StrCat("--shard_id=", s),
                        absl::StrCat("--num_shards=", shards), "--port=0",
                        "--port_file=" + port_files.back(), "--log_level=warn"});
    commands.back().insert(commands.back().end(), flags.begin(), flags.end());
  }
  std::promise<std::vector<pid_t>> started;
  std::future<std::vector<pid_t>> pids = started.get_future();
  supervisor_ = std::thread(&ShardProcesses::Supervise, this, commands, std::move(started));
  pids_ = pids.get();
  for (int s = 0; s < shards; ++s) {
    for (int i = 0; i < 300 && !std::filesystem::exists(port_files[s]); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::ifstream in(port_files[s]);
    int port = 0;
    if (!(in >> port)) {
      spdlog::critical("ps_server {} did not start", s);
      Shutdown();
      std::exit(1);
    }
    addresses_.push_back(absl::StrCat("127.0.0.1:", port));
  }
}

void ShardProcesses::Supervise(const std::vector<std::vector<std::string>>& commands,
                               std::promise<std::vector<pid_t>> started) {
  // Forked from this thread, which outlives them: PR_SET_PDEATHSIG follows the thread.
  ChildProcesses children([](const std::string& name, const std::string& line) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), line.c_str());
  });
  std::vector<pid_t> pids;
  for (size_t s = 0; s < commands.size(); ++s) {
    absl::StatusOr<int> id = children.Start(absl::StrCat("ps-", s), commands[s]);
    pids.push_back(id.ok() ? children.pid(*id) : -1);
    if (!id.ok()) spdlog::critical("cannot start {}: {}", commands[s][0], id.status().ToString());
  }
  started.set_value(pids);
  std::vector<bool> reported(pids.size(), false);
  while (!children.Poll(absl::Seconds(1), signals_.fd())) {
    for (size_t id = 0; id < children.size(); ++id) {
      if (children.running(id) || reported[id]) continue;
      reported[id] = true;  // the benchmark's calls to it fail and say so
      spdlog::error("{} exited with code {}", children.name(id), children.exit_code(id));
    }
  }
  const int signo = signals_.Read();  // 0: Shutdown()'s Wake()
  children.StopAll();
  if (signo == 0) return;
  std::filesystem::remove_all(dir_);
  std::fprintf(stderr, "stopped by %s: the shard processes are stopped\n",
               signo == SIGINT ? "SIGINT" : "SIGTERM");
  _exit(128 + signo);  // the benchmark's threads are mid-call; nothing of theirs is kept
}

void ShardProcesses::Shutdown() {
  if (!supervisor_.joinable()) return;
  signals_.Wake();
  supervisor_.join();
  std::filesystem::remove_all(dir_);
}

ShardProcesses::~ShardProcesses() { Shutdown(); }

double ShardProcesses::RssMib() const {
  double total = 0;
  for (pid_t pid : pids_) total += ProcessMemoryMib(pid);
  return total;
}

double ProcessMemoryMib(pid_t pid, const char* field) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  const std::string prefix = absl::StrCat(field, ":");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(prefix, 0) == 0) return std::stod(line.substr(prefix.size())) / 1024.0;
  }
  return 0;
}

}  // namespace ps::bench
