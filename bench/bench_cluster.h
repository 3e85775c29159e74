#ifndef PS_BENCH_BENCH_CLUSTER_H_
#define PS_BENCH_BENCH_CLUSTER_H_

// Shard processes for the benchmarks: ps_server (from beside the benchmark's binary) started on
// loopback ports, so their memory can be read from /proc apart from the benchmark's own.

#include <sys/types.h>

#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/base/shutdown_signal.h"

namespace ps::bench {

// Starts `shards` ps_server processes with `flags` (each also gets its --shard_id, --num_shards,
// a free port and --log_level=warn) and waits for their ports; exits the process with code 1,
// leaving nothing, when one does not start. The benchmark leaves no process or file behind:
// - destruction stops the servers (SIGTERM, then SIGKILL after a grace period) and removes their
//   port files;
// - while the set is alive, SIGINT or SIGTERM does the same and ends the benchmark with 128 +
//   the signal's number, naming the signal;
// - a benchmark killed outright takes its servers with it (PR_SET_PDEATHSIG).
// Their output goes to stderr, each line prefixed with the shard's name. At most one set at a
// time (it owns the process's SignalPipe).
class ShardProcesses {
 public:
  ShardProcesses(int shards, const std::vector<std::string>& flags);
  ~ShardProcesses();
  ShardProcesses(const ShardProcesses&) = delete;
  ShardProcesses& operator=(const ShardProcesses&) = delete;

  const std::vector<std::string>& addresses() const { return addresses_; }
  // Resident memory of all shard processes, MiB.
  double RssMib() const;

 private:
  // The thread that owns the processes: starts them, streams their output until Wake() or a
  // signal, then stops them.
  void Supervise(const std::vector<std::vector<std::string>>& commands,
                 std::promise<std::vector<pid_t>> started);
  // Ends the supervising thread (its processes stopped) and removes the port files.
  void Shutdown();

  std::string dir_;
  std::vector<pid_t> pids_;
  std::vector<std::string> addresses_;
  SignalPipe signals_;
  std::thread supervisor_;
};

// A process's resident memory ("VmRSS") or its peak ("VmHWM"), MiB; 0 when unreadable.
double ProcessMemoryMib(pid_t pid, const char* field = "VmRSS");

}  // namespace ps::bench

#endif  // PS_BENCH_BENCH_CLUSTER_H_
