#ifndef PS_COMMON_SHUTDOWN_SIGNAL_H_
#define PS_COMMON_SHUTDOWN_SIGNAL_H_

// Orderly handling of SIGINT and SIGTERM for long-running processes. BlockShutdownSignals() must
// run in main() before any thread starts, so that every thread inherits the blocked mask and the
// signals are delivered only to the dedicated watcher thread, which then runs `on_signal` in
// ordinary (not async-signal) context.

#include <functional>
#include <thread>

namespace ps {

void BlockShutdownSignals();

// Starts a thread that waits for SIGINT or SIGTERM and calls on_signal(signo) once. Stop() (or the
// destructor) ends the wait without calling it.
class ShutdownSignalWatcher {
 public:
  explicit ShutdownSignalWatcher(std::function<void(int)> on_signal);
  ~ShutdownSignalWatcher();
  void Stop();

 private:
  std::thread thread_;
  bool stopped_ = false;
};

}  // namespace ps

#endif  // PS_COMMON_SHUTDOWN_SIGNAL_H_
