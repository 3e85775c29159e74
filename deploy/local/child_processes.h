#ifndef PS_DEPLOY_LOCAL_CHILD_PROCESSES_H_
#define PS_DEPLOY_LOCAL_CHILD_PROCESSES_H_

// A set of child processes whose output is streamed line by line with a name prefix, and which
// are all stopped (SIGTERM, then SIGKILL after a grace period) when the set is torn down, so the
// launcher leaves no process behind. Children are told to die with the launcher
// (PR_SET_PDEATHSIG), which covers a launcher killed by SIGKILL.
//
// Single-threaded: one thread owns the set and calls Poll().

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ps {

class ChildProcesses {
 public:
  // Called for every complete line a child prints (stdout and stderr together).
  using LineHandler = std::function<void(const std::string& name, const std::string& line)>;

  explicit ChildProcesses(LineHandler on_line) : on_line_(std::move(on_line)) {}
  ~ChildProcesses();  // StopAll()
  ChildProcesses(const ChildProcesses&) = delete;
  ChildProcesses& operator=(const ChildProcesses&) = delete;

  // Starts argv[0] (a path) with argv. Returns an id for the child. The child starts with the
  // default signal mask, in its own process group.
  absl::StatusOr<int> Start(const std::string& name, const std::vector<std::string>& argv);

  // Streams output and reaps children for up to `timeout`, returning early when a child exits
  // or `interrupt_fd` (a signalfd, or -1) becomes readable. Returns true if interrupt_fd fired.
  bool Poll(absl::Duration timeout, int interrupt_fd);

  bool running(int id) const { return children_[id].running; }
  // The exit status: 0..255 for an exit, 128+signo for a death by signal; -1 while running.
  int exit_code(int id) const { return children_[id].exit_code; }
  const std::string& name(int id) const { return children_[id].name; }
  pid_t pid(int id) const { return children_[id].pid; }
  size_t size() const { return children_.size(); }

  // Sends SIGTERM to `id` and waits up to `grace` for it (streaming its output), then SIGKILL.
  void Stop(int id, absl::Duration grace);
  // SIGKILL to `id`, and waits until it is reaped: no shutdown of its own (a shard's final
  // checkpoint) happens.
  void Kill(int id) { WaitFor({id}, absl::ZeroDuration()); }
  // Stop() for every running child, all at once.
  void StopAll(absl::Duration grace = absl::Seconds(5));

 private:
  struct Child {
    std::string name;
    pid_t pid = -1;
    int fd = -1;          // read end of the child's stdout+stderr pipe, -1 once closed
    std::string partial;  // output after the last newline
    bool running = false;
    int exit_code = -1;
  };
  void Drain(Child& c, bool flush_partial);
  void Reap();
  void WaitFor(const std::vector<int>& ids, absl::Duration grace);

  LineHandler on_line_;
  std::vector<Child> children_;
};

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_CHILD_PROCESSES_H_
