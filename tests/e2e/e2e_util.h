#ifndef PS_TESTS_E2E_E2E_UTIL_H_
#define PS_TESTS_E2E_E2E_UTIL_H_

// Helpers of the end-to-end tests: start the real binaries, wait for them, read what a run wrote.
// Failures inside them are reported through gtest.

#include <sys/types.h>

#include <string>
#include <vector>

namespace ps::e2e {

std::string BinDir();   // $PS_BIN_DIR (set by ctest), else "bin"
std::string DataDir();  // $PS_DATA_DIR, else Debian's Fashion-MNIST folder
// A fresh, empty folder for one test's run, removed after the last test of the process when every
// test passed (kept, and named on stderr, when one failed).
std::string RunDir(const std::string& name);

// Starts args[0] with args, its stdout and stderr going to the file `log`.
pid_t Spawn(std::vector<std::string> args, const std::string& log);
// Waits for `pid`: its exit code, or 128+signal.
int WaitExit(pid_t pid);
// kill(pid, sig) for a process the test started, with a guard: a pid <= 0 (a failed Spawn gives
// -1) is a test failure and signals nothing, where kill() would signal every process the test
// may signal (-1; as root, the whole machine) or the test's own process group (0). Returns
// kill()'s result, or -1.
int Signal(pid_t pid, int sig);
// Runs args to completion with its output in `log`; returns the exit code.
int RunTool(const std::vector<std::string>& args, const std::string& log);
// Starts ps_launch with `args` and --metrics_dir=dir, its output going to <dir>/launch.log.
pid_t StartLaunch(const std::string& dir, std::vector<std::string> args, bool quiet = true);
// StartLaunch and wait; a non-zero exit is a test failure showing the log.
int RunLaunch(const std::string& dir, const std::vector<std::string>& args, bool quiet = true);

std::string ReadAll(const std::string& path);
// The number after "key": in a flat JSON line; NaN when absent.
double Field(const std::string& line, const std::string& key);
// The lines of a worker's metrics file of the given kind ("step", "start", ...).
std::vector<std::string> LinesOfKind(const std::string& path, const std::string& kind);
inline std::vector<std::string> StepLines(const std::string& path) {
  return LinesOfKind(path, "step");
}
std::vector<float> ReadWeights(const std::string& path);
// Processes whose command line mentions `marker` (a run folder): none may outlive a launch.
std::vector<std::string> ProcessesMentioning(const std::string& marker);
// Waits up to `timeout` until the worker metrics file at `path` holds `steps` step lines.
bool WaitForSteps(const std::string& path, size_t steps, double timeout_s);
// A ps_server of a test's own: started with `flags` and --port_file=<dir>/<name>.port, its output
// in `log` (<dir>/<name>.log). `pid` is -1 when it did not start, `port` 0 when it wrote none
// within 30 s; the caller asserts both, showing the log.
struct TestServer {
  pid_t pid = -1;
  int port = 0;
  std::string log;
};
TestServer StartServer(const std::string& dir, const std::string& name,
                       const std::vector<std::string>& flags);
// Waits up to `timeout` until the shard checkpoint folder `dir` holds a finished checkpoint
// (a ckpt-*.ps file: the writer renames it there once written and synced).
bool WaitForCheckpoint(const std::string& dir, double timeout_s);
// Runs ps_launch with `job` in `dir`, its shards checkpointing every `checkpoint_every` updates
// into <dir>/checkpoints and restarted 1 s after they die; kills shard 1 with SIGKILL once worker
// 0 has logged `steps` steps and a checkpoint of shard 1 is on disk; returns the launcher's exit
// code. Its output (not quiet) is in <dir>/launch.log.
int RunWithShardKilled(const std::string& dir, int checkpoint_every, int steps,
                       const std::vector<std::string>& job);
// The checkpoint version a ps_launch log says every shard went back to (--rollback_shards); -1
// when it says none.
int64_t RollbackVersionIn(const std::string& launch_log);

// Flags of a small, fast run: a subset of the data, a small MLP, 2 shards.
std::vector<std::string> Common(const std::string& train_limit);
std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& b);

}  // namespace ps::e2e

#endif  // PS_TESTS_E2E_E2E_UTIL_H_
