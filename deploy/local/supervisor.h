#ifndef PS_DEPLOY_LOCAL_SUPERVISOR_H_
#define PS_DEPLOY_LOCAL_SUPERVISOR_H_

// The launcher's children as a supervisor keeps them: each member is a named command that is
// started, watched, and restarted when it dies (if the run asks for it), with its pid written to
// <run_dir>/<name>.pid where tests and users find it. SIGINT and SIGTERM reach the supervisor
// through a descriptor polled with the children's output: every wait ends early on one.

#include <cstdio>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/shutdown_signal.h"
#include "common/cli/cli.h"
#include "deploy/local/child_processes.h"

namespace ps {

// INVALID_ARGUMENT naming child `name`, which exited with kExitConfigurationError.
absl::Status RefusedConfiguration(const std::string& name);

struct SupervisorOptions {
  std::string run_dir;
  // Show only progress lines, warnings and errors of the children; a child that fails has the
  // last lines it hid shown too.
  bool quiet = false;
  absl::Duration restart_delay = absl::Seconds(2);
  int max_restarts = 5;        // per member
  std::FILE* output = stdout;  // where the children's lines are shown
};

class Supervisor {
 public:
  // A child the supervisor keeps running: the command that (re)starts it, its current process
  // and when a pending restart is due.
  struct Member {
    std::string name;
    std::vector<std::string> command;
    int id = -1;  // in ChildProcesses
    int restarts = 0;
    absl::Time restart_at = absl::InfiniteFuture();  // a restart is pending while finite
  };

  // A rollback's checkpoint version: the one every shard can go back to, or nullopt. Asked when a
  // dead shard is due to restart, first with `stopped` false while the others still run (a look
  // at what is there, which spares them when there is nothing), then with `stopped` true once
  // they are killed: the version every shard restarts at (ps_server --restore_version).
  using RollbackVersion = std::function<std::optional<int64_t>(bool stopped)>;

  explicit Supervisor(SupervisorOptions options);

  // Starts (or restarts) `m`, with `extra_args` after its command for this start only.
  absl::Status Start(Member& m, const std::vector<std::string>& extra_args = {});
  // Waits for a shard's port file (30 s at most); 0 when the shard died first. CANCELLED on a
  // signal.
  absl::StatusOr<int> WaitForPort(const Member& m, const std::string& port_file);
  // Runs until every worker has exited 0. A member that dies is restarted when its group is
  // restartable (not beyond max_restarts); any other death is ABORTED naming it, and one with
  // kExitConfigurationError, which no restart can fix, is RefusedConfiguration at once.
  // CANCELLED on a signal. With `rollback`, a shard's restart is a rollback of every shard.
  absl::Status RunUntilWorkersFinish(std::vector<Member>& shards, bool restart_shards,
                                     std::vector<Member>& workers, bool restart_workers,
                                     const RollbackVersion& rollback = nullptr);
  // Times every shard went back to one checkpoint version.
  int rollbacks() const { return rollbacks_; }
  // Runs one command to its end and returns its exit code. CANCELLED on a signal.
  absl::StatusOr<int> RunToEnd(const std::string& name, const std::vector<std::string>& command);
  // Waits `duration` unless a signal comes first (then it returns early, the signal consumed).
  void Hold(absl::Duration duration);
  // Stops every child (SIGTERM, then SIGKILL after a grace period).
  void StopAll() { children_.StopAll(); }
  // The signal that ended a wait with CANCELLED (consumed).
  int TakeSignal() { return signals_.Read(); }
  int exit_code(const Member& m) const { return children_.exit_code(m.id); }

 private:
  // An error when `m` failed for good; otherwise schedules its restart, or performs it through
  // `restart` when it is due.
  absl::Status Supervise(Member& m, bool restartable, bool finished_ok,
                         const std::function<absl::Status(Member&)>& restart);
  // `dead`'s restart under a rollback: the other shards killed, every shard started again at
  // the version `rollback` gives; `dead` alone when there is none to go back to.
  absl::Status RollBack(std::vector<Member>& shards, Member& dead, const RollbackVersion& rollback);

  // Shows a child's line (or, under quiet, keeps it among the last hidden ones).
  void Show(const std::string& name, const std::string& line);
  // Shows the lines quiet hid of child `name`, the last kHiddenTail, once.
  void ShowHiddenTail(const std::string& name);

  SupervisorOptions options_;
  int rollbacks_ = 0;
  absl::flat_hash_map<std::string, std::deque<std::string>> hidden_;
  SignalPipe signals_;
  ChildProcesses children_;
};

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_SUPERVISOR_H_
