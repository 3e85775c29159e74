#ifndef PS_BENCH_BENCH_CLUSTER_H_
#define PS_BENCH_BENCH_CLUSTER_H_

// Shard processes for the benchmarks: ps_server (from beside the benchmark's binary) started on
// loopback ports, so their memory can be read from /proc apart from the benchmark's own.

#include <sys/types.h>

#include <string>
#include <vector>

namespace ps::bench {

// Starts `shards` ps_server processes with `flags` (each also gets its --shard_id, --num_shards,
// a free port and --log_level=warn) and waits for their ports; exits the process when one does
// not start. SIGTERMs and reaps them on destruction.
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
  std::string dir_;
  std::vector<pid_t> pids_;
  std::vector<std::string> addresses_;
};

// A process's resident memory ("VmRSS") or its peak ("VmHWM"), MiB; 0 when unreadable.
double ProcessMemoryMib(pid_t pid, const char* field = "VmRSS");

}  // namespace ps::bench

#endif  // PS_BENCH_BENCH_CLUSTER_H_
