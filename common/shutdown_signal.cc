#include "common/shutdown_signal.h"

#include <pthread.h>
#include <signal.h>

namespace ps {

namespace {

// SIGUSR2 is kept private to this mechanism: Stop() sends it to end the watcher's wait.
sigset_t WatchedSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR2);
  return set;
}

}  // namespace

void BlockShutdownSignals() {
  sigset_t set = WatchedSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

ShutdownSignalWatcher::ShutdownSignalWatcher(std::function<void(int)> on_signal) {
  thread_ = std::thread([on_signal = std::move(on_signal)] {
    sigset_t set = WatchedSignals();
    int signo = 0;
    if (sigwait(&set, &signo) == 0 && signo != SIGUSR2) on_signal(signo);
  });
}

ShutdownSignalWatcher::~ShutdownSignalWatcher() { Stop(); }

void ShutdownSignalWatcher::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (thread_.joinable()) {
    // If the watcher already returned, the signal stays pending on a blocked mask: harmless.
    pthread_kill(thread_.native_handle(), SIGUSR2);
    thread_.join();
  }
}

}  // namespace ps
