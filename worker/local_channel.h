#ifndef PS_WORKER_LOCAL_CHANNEL_H_
#define PS_WORKER_LOCAL_CHANNEL_H_

// The worker's end of the local call path (common/transport/local_frames.h): one connection to
// a shard on this host, which GrpcParameterClient uses for Push, Pull and PushPull while it
// works and leaves for gRPC as soon as it does not. One call at a time (TryAcquire).

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ps {

class LocalChannel {
 public:
  // Connects to the shard's socket `name` and presents `token`; UNAVAILABLE when the socket is
  // not reachable from here (another network namespace), UNAUTHENTICATED when refused.
  static absl::StatusOr<std::shared_ptr<LocalChannel>> Connect(const std::string& name,
                                                               const std::string& token,
                                                               absl::Duration timeout);
  ~LocalChannel();
  LocalChannel(const LocalChannel&) = delete;
  LocalChannel& operator=(const LocalChannel&) = delete;

  int fd() const { return fd_; }
  // Takes the channel for one call; false when another call has it.
  bool TryAcquire() { return !busy_.exchange(true); }
  void Release() { busy_.store(false); }
  // Wakes a call waiting on the channel and breaks it for good (thread-safe): the shard sees the
  // connection go and cancels the call's waiting pull.
  void Interrupt();
  bool interrupted() const { return interrupted_.load(); }

 private:
  explicit LocalChannel(int fd) : fd_(fd) {}
  const int fd_;
  std::atomic<bool> busy_{false};
  std::atomic<bool> interrupted_{false};
};

}  // namespace ps

#endif  // PS_WORKER_LOCAL_CHANNEL_H_
