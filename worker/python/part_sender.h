#ifndef PS_WORKER_PYTHON_PART_SENDER_H_
#define PS_WORKER_PYTHON_PART_SENDER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/parameter_client.h"
#include "worker/python/py_convert.h"

namespace ps {

// Sends the parts of a step's gradient in the order they are queued, one PushParts call at a
// time, on its own thread: the overlap of pushes with backward (priority scheduling's order).
class PartSender {
 public:
  using Send = std::function<absl::StatusOr<PushStats>(KeyRange)>;
  explicit PartSender(Send send) : send_(std::move(send)), thread_([this] { Loop(); }) {}
  ~PartSender() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Queue(KeyRange part) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(part);
      ++queued_;
    }
    cv_.notify_all();
  }
  // Waits until every queued part is sent; the step's combined stats, or the first error. Resets
  // for the next step.
  absl::StatusOr<PushStats> Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return sent_ == queued_; });
    absl::StatusOr<PushStats> result =
        error_.ok() ? absl::StatusOr<PushStats>(stats_) : absl::StatusOr<PushStats>(error_);
    error_ = absl::OkStatus();
    stats_ = PushStats();
    return result;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return done_ || !queue_.empty(); });
      if (queue_.empty()) return;  // done
      const KeyRange part = queue_.front();
      queue_.pop_front();
      const bool skip = !error_.ok();  // the step failed already: its other parts do not go
      lock.unlock();
      absl::StatusOr<PushStats> sent = skip ? absl::StatusOr<PushStats>(PushStats()) : send_(part);
      lock.lock();
      if (!sent.ok() && error_.ok()) error_ = sent.status();
      if (sent.ok()) AddPushStats(*sent, &stats_);
      ++sent_;
      cv_.notify_all();
    }
  }

  Send send_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<KeyRange> queue_;
  int64_t queued_ = 0, sent_ = 0;
  bool done_ = false;
  absl::Status error_;
  PushStats stats_;
  std::thread thread_;
};

}  // namespace ps

#endif  // PS_WORKER_PYTHON_PART_SENDER_H_
