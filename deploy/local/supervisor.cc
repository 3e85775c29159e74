#include "deploy/local/supervisor.h"

#include <cstdio>
#include <deque>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "common/base/whole_file.h"

namespace ps {

namespace {

// The lines --quiet hides that are kept per child, the last ones, to be shown when it fails.
constexpr size_t kHiddenTail = 20;

std::string Prefixed(const std::string& name, const std::string& line) {
  const std::string prefix = "[" + name + "]";
  return absl::StartsWith(line, prefix) ? line : prefix + " " + line;
}

absl::Status Interrupted() { return absl::CancelledError("interrupted by a signal"); }

}  // namespace

absl::Status RefusedConfiguration(const std::string& name) {
  return absl::InvalidArgumentError(absl::StrCat(
      name, " exited with code ", kExitConfigurationError,
      ", a configuration error (its message is above): fix the flags or the data and run again"));
}

Supervisor::Supervisor(SupervisorOptions options)
    : options_(std::move(options)),
      children_([this](const std::string& name, const std::string& line) { Show(name, line); }) {}

// Rank 0's progress lines are for the user and shown plain; the rest with the child's name.
void Supervisor::Show(const std::string& name, const std::string& line) {
  std::FILE* out = options_.output;
  if (name == "worker-0" && absl::StartsWith(line, "epoch ")) {
    std::fprintf(out, "%s\n", line.c_str());
  } else if (!options_.quiet || absl::StrContains(line, " E ") || absl::StrContains(line, " W ") ||
             absl::StartsWith(line, "test_accuracy")) {
    std::fprintf(out, "%s\n", Prefixed(name, line).c_str());
  } else {
    std::deque<std::string>& hidden = hidden_[name];
    hidden.push_back(line);
    if (hidden.size() > kHiddenTail) hidden.pop_front();
  }
  std::fflush(out);
}

void Supervisor::ShowHiddenTail(const std::string& name) {
  auto it = hidden_.find(name);
  if (it == hidden_.end() || it->second.empty()) return;
  std::fprintf(options_.output, "ps_launch: the last %zu lines of %s, which --quiet hid:\n",
               it->second.size(), name.c_str());
  for (const std::string& line : it->second) {
    std::fprintf(options_.output, "%s\n", Prefixed(name, line).c_str());
  }
  std::fflush(options_.output);
  it->second.clear();
}

absl::Status Supervisor::Start(Member& m, const std::vector<std::string>& extra_args) {
  std::vector<std::string> command = m.command;
  command.insert(command.end(), extra_args.begin(), extra_args.end());
  absl::StatusOr<int> id = children_.Start(m.name, command);
  if (!id.ok()) return id.status();
  m.id = *id;
  m.restart_at = absl::InfiniteFuture();
  return WriteWholeFile(absl::StrCat(options_.run_dir, "/", m.name, ".pid"),
                        absl::StrCat(children_.pid(*id), "\n"));
}

absl::StatusOr<int> Supervisor::WaitForPort(const Member& m, const std::string& port_file) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    std::ifstream in(port_file);
    int port = 0;
    if (in >> port && port > 0) return port;
    if (!children_.running(m.id)) {
      ShowHiddenTail(m.name);
      return 0;
    }
    if (children_.Poll(absl::Milliseconds(20), signals_.fd())) return Interrupted();
  }
  return 0;
}

absl::Status Supervisor::Supervise(Member& m, bool restartable, bool finished_ok,
                                   const std::function<absl::Status(Member&)>& restart) {
  if (children_.running(m.id) || finished_ok) return absl::OkStatus();
  const int code = children_.exit_code(m.id);
  ShowHiddenTail(m.name);
  if (code == kExitConfigurationError) return RefusedConfiguration(m.name);
  if (!restartable || m.restarts >= options_.max_restarts) {
    return absl::AbortedError(
        absl::StrCat(m.name, " exited with code ", code, restartable ? " (restarts used up)" : ""));
  }
  if (m.restart_at == absl::InfiniteFuture()) {
    m.restart_at = absl::Now() + options_.restart_delay;
    std::printf("ps_launch: %s exited with code %d; restarting it in %.1fs\n", m.name.c_str(), code,
                absl::ToDoubleSeconds(options_.restart_delay));
    std::fflush(stdout);
  } else if (absl::Now() >= m.restart_at) {
    ++m.restarts;
    return restart(m);
  }
  return absl::OkStatus();
}

absl::Status Supervisor::RollBack(std::vector<Member>& shards, Member& dead,
                                  const RollbackVersion& rollback) {
  if (!rollback(/*stopped=*/false).has_value()) {
    std::printf(
        "ps_launch: warning: no checkpoint version is on every shard; %s restarts alone at its "
        "newest\n",
        dead.name.c_str());
    std::fflush(stdout);
    return Start(dead);
  }
  for (Member& m : shards) {
    if (&m != &dead && children_.running(m.id)) children_.Kill(m.id);
  }
  const std::optional<int64_t> version = rollback(/*stopped=*/true);
  if (version.has_value()) {
    std::printf("ps_launch: every shard goes back to its checkpoint of version %lld\n",
                static_cast<long long>(*version));
  } else {
    std::printf(
        "ps_launch: warning: no checkpoint version is intact on every shard; each restarts at "
        "its newest, and the rounds redone see newer weights on some shards\n");
  }
  std::fflush(stdout);
  ++rollbacks_;
  for (Member& m : shards) {
    std::vector<std::string> extra_args;
    if (version.has_value()) extra_args.push_back(absl::StrCat("--restore_version=", *version));
    RETURN_IF_ERROR(Start(m, extra_args));
  }
  return absl::OkStatus();
}

absl::Status Supervisor::RunUntilWorkersFinish(std::vector<Member>& shards, bool restart_shards,
                                               std::vector<Member>& workers, bool restart_workers,
                                               const RollbackVersion& rollback) {
  const auto start = [this](Member& m) { return Start(m); };
  const auto restart_shard = [&](Member& dead) {
    return rollback ? RollBack(shards, dead, rollback) : Start(dead);
  };
  for (;;) {
    if (children_.Poll(absl::Milliseconds(100), signals_.fd())) return Interrupted();
    for (Member& m : shards) {
      if (absl::Status s = Supervise(m, restart_shards, false, restart_shard); !s.ok()) return s;
    }
    bool all_done = true;
    for (Member& m : workers) {
      const bool ok = !children_.running(m.id) && children_.exit_code(m.id) == 0;
      if (absl::Status s = Supervise(m, restart_workers, ok, start); !s.ok()) return s;
      all_done = all_done && ok;
    }
    if (all_done) return absl::OkStatus();
  }
}

absl::StatusOr<int> Supervisor::RunToEnd(const std::string& name,
                                         const std::vector<std::string>& command) {
  absl::StatusOr<int> id = children_.Start(name, command);
  if (!id.ok()) return id.status();
  while (children_.running(*id)) {
    if (children_.Poll(absl::Milliseconds(200), signals_.fd())) return Interrupted();
  }
  if (children_.exit_code(*id) != 0) ShowHiddenTail(name);
  return children_.exit_code(*id);
}

void Supervisor::Hold(absl::Duration duration) {
  const absl::Time until = absl::Now() + duration;
  while (absl::Now() < until) {
    if (children_.Poll(absl::Milliseconds(100), signals_.fd())) {
      signals_.Read();
      return;
    }
  }
}

}  // namespace ps
