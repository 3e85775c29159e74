#ifndef PS_COMMON_BASE_SHUTDOWN_SIGNAL_H_
#define PS_COMMON_BASE_SHUTDOWN_SIGNAL_H_

// Orderly handling of SIGINT and SIGTERM for long-running processes.
//
// Signal handlers, not blocked masks: a library may start threads before main() (OpenBLAS starts
// its pool from a constructor), and such a thread would receive a signal that the other threads
// block and die of its default action. The handler only writes the signal number to a pipe;
// everything else happens in ordinary threads that read it.

#include <functional>
#include <thread>

namespace ps {

// While alive, SIGINT and SIGTERM make fd() readable; one byte per signal. At most one SignalPipe
// may exist at a time. Destruction restores the default dispositions.
class SignalPipe {
 public:
  SignalPipe();
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  int fd() const { return read_fd_; }
  // Blocks for the next byte: a signal number, or 0 after Wake().
  int Read();
  // Makes fd() readable with a 0 byte (to end a thread blocked in Read()).
  void Wake();

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
};

// Calls on_signal(signo) once, from its own thread, for the first SIGINT or SIGTERM. Stop() (or
// the destructor) ends the thread without calling it.
class ShutdownSignalWatcher {
 public:
  explicit ShutdownSignalWatcher(std::function<void(int)> on_signal);
  ~ShutdownSignalWatcher();
  void Stop();

 private:
  SignalPipe pipe_;
  std::thread thread_;
};

}  // namespace ps

#endif  // PS_COMMON_BASE_SHUTDOWN_SIGNAL_H_
