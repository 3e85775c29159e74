#include "deploy/local/child_processes.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ps {

ChildProcesses::~ChildProcesses() { StopAll(); }

absl::StatusOr<int> ChildProcesses::Start(const std::string& name,
                                          const std::vector<std::string>& argv) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    execv(args[0], args.data());
    const char msg[] = "exec failed\n";
    (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
    _exit(127);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  Child c;
  c.name = name;
  c.pid = pid;
  c.fd = fds[0];
  c.running = true;
  children_.push_back(std::move(c));
  return static_cast<int>(children_.size() - 1);
}

void ChildProcesses::Drain(Child& c, bool flush_partial) {
  char buf[65536];
  while (c.fd >= 0) {
    const ssize_t n = read(c.fd, buf, sizeof(buf));
    if (n > 0) {
      c.partial.append(buf, n);
      size_t start = 0;
      for (size_t nl; (nl = c.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
        on_line_(c.name, c.partial.substr(start, nl - start));
      }
      c.partial.erase(0, start);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
    close(c.fd);  // EOF or error: the child closed its output
    c.fd = -1;
  }
  if ((flush_partial || c.fd < 0) && !c.partial.empty()) {
    on_line_(c.name, c.partial);
    c.partial.clear();
  }
}

void ChildProcesses::Reap() {
  for (Child& c : children_) {
    if (!c.running) continue;
    int status = 0;
    const pid_t r = waitpid(c.pid, &status, WNOHANG);
    if (r != c.pid) continue;
    c.running = false;
    c.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    Drain(c, /*flush_partial=*/true);
  }
}

bool ChildProcesses::Poll(absl::Duration timeout, int interrupt_fd) {
  std::vector<pollfd> fds;
  std::vector<Child*> owners;
  for (Child& c : children_) {
    if (c.fd < 0) continue;
    fds.push_back({c.fd, POLLIN, 0});
    owners.push_back(&c);
  }
  if (interrupt_fd >= 0) fds.push_back({interrupt_fd, POLLIN, 0});
  // Children that exit close their pipe (POLLHUP), which wakes this poll; a short cap bounds the
  // delay for a child whose output descriptor outlives it in a grandchild.
  const int ms = static_cast<int>(std::min(absl::ToInt64Milliseconds(timeout), int64_t{200}));
  const int ready = poll(fds.data(), fds.size(), std::max(ms, 0));
  bool interrupted = false;
  if (ready > 0) {
    for (size_t i = 0; i < owners.size(); ++i) {
      if (fds[i].revents != 0) Drain(*owners[i], false);
    }
    interrupted = interrupt_fd >= 0 && (fds.back().revents & POLLIN) != 0;
  }
  Reap();
  return interrupted;
}

void ChildProcesses::WaitFor(const std::vector<int>& ids, absl::Duration grace) {
  const absl::Time deadline = absl::Now() + grace;
  auto any_running = [&] {
    for (int id : ids) {
      if (children_[id].running) return true;
    }
    return false;
  };
  while (any_running() && absl::Now() < deadline) Poll(absl::Milliseconds(50), -1);
  for (int id : ids) {
    if (children_[id].running) kill(children_[id].pid, SIGKILL);
  }
  while (any_running()) Poll(absl::Milliseconds(50), -1);
}

void ChildProcesses::Stop(int id, absl::Duration grace) {
  if (children_[id].running) kill(children_[id].pid, SIGTERM);
  WaitFor({id}, grace);
}

void ChildProcesses::StopAll(absl::Duration grace) {
  std::vector<int> ids;
  for (size_t i = 0; i < children_.size(); ++i) {
    if (!children_[i].running) continue;
    kill(children_[i].pid, SIGTERM);
    ids.push_back(static_cast<int>(i));
  }
  WaitFor(ids, grace);
  for (Child& c : children_) {
    if (c.fd >= 0) {
      close(c.fd);
      c.fd = -1;
    }
  }
}

}  // namespace ps
