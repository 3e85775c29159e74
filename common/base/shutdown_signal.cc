#include "common/base/shutdown_signal.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cassert>
#include <cerrno>

namespace ps {

namespace {

std::atomic<int> g_signal_write_fd{-1};

void OnShutdownSignal(int signo) {
  const int saved_errno = errno;  // a handler must not disturb the interrupted code's errno
  const int fd = g_signal_write_fd.load();
  if (fd >= 0) {
    const char byte = static_cast<char>(signo);
    (void)!write(fd, &byte, 1);
  }
  errno = saved_errno;
}

void SetHandler(void (*handler)(int)) {
  struct sigaction sa = {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace

SignalPipe::SignalPipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) == 0) {
    read_fd_ = fds[0];
    write_fd_ = fds[1];
    // A full pipe must never block the handler.
    fcntl(write_fd_, F_SETFL, fcntl(write_fd_, F_GETFL) | O_NONBLOCK);
  }
  const int previous = g_signal_write_fd.exchange(write_fd_);
  assert(previous == -1 && "only one SignalPipe at a time");
  (void)previous;
  SetHandler(OnShutdownSignal);
}

SignalPipe::~SignalPipe() {
  SetHandler(SIG_DFL);
  g_signal_write_fd.store(-1);
  if (read_fd_ >= 0) close(read_fd_);
  if (write_fd_ >= 0) close(write_fd_);
}

int SignalPipe::Read() {
  char byte = 0;
  ssize_t n;
  do {
    n = read(read_fd_, &byte, 1);
  } while (n < 0 && errno == EINTR);
  return n == 1 ? static_cast<unsigned char>(byte) : 0;
}

void SignalPipe::Wake() {
  const char zero = 0;
  (void)!write(write_fd_, &zero, 1);
}

ShutdownSignalWatcher::ShutdownSignalWatcher(std::function<void(int)> on_signal) {
  thread_ = std::thread([this, on_signal = std::move(on_signal)] {
    const int signo = pipe_.Read();
    if (signo != 0) on_signal(signo);
  });
}

ShutdownSignalWatcher::~ShutdownSignalWatcher() { Stop(); }

void ShutdownSignalWatcher::Stop() {
  if (!thread_.joinable()) return;
  pipe_.Wake();
  thread_.join();
}

}  // namespace ps
