#include "bench/bench_cluster.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

extern char** environ;

namespace ps::bench {

namespace {

std::string SelfDir() { return std::filesystem::read_symlink("/proc/self/exe").parent_path(); }

}  // namespace

ShardProcesses::ShardProcesses(int shards, const std::vector<std::string>& flags) {
  dir_ = std::filesystem::temp_directory_path() / absl::StrCat("ps_bench_shards.", getpid());
  std::filesystem::create_directories(dir_);
  for (int s = 0; s < shards; ++s) {
    const std::string port_file = absl::StrCat(dir_, "/ps-", s, ".port");
    std::vector<std::string> args = {SelfDir() + "/ps_server",
                                     absl::StrCat("--shard_id=", s),
                                     absl::StrCat("--num_shards=", shards),
                                     "--port=0",
                                     "--port_file=" + port_file,
                                     "--log_level=warn"};
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) {
      spdlog::critical("cannot start {}", args[0]);
      std::exit(1);
    }
    pids_.push_back(pid);
    for (int i = 0; i < 300 && !std::filesystem::exists(port_file); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::ifstream in(port_file);
    int port = 0;
    if (!(in >> port)) {
      spdlog::critical("ps_server {} did not start", s);
      std::exit(1);
    }
    addresses_.push_back(absl::StrCat("127.0.0.1:", port));
  }
}

ShardProcesses::~ShardProcesses() {
  for (pid_t pid : pids_) kill(pid, SIGTERM);
  for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  std::filesystem::remove_all(dir_);
}

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
