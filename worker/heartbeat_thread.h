#ifndef PS_WORKER_HEARTBEAT_THREAD_H_
#define PS_WORKER_HEARTBEAT_THREAD_H_

// Keeps a registered worker's leases alive: renews them on every shard each lease/3 (at least
// every 10 ms apart) until destroyed. A failed beat is logged, not fatal: the next one comes soon,
// and a lease lost for good shows up as ABORTED on the worker's next call.

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/time/time.h"
#include "spdlog/spdlog.h"
#include "worker/parameter_client.h"

namespace ps {

class HeartbeatThread {
 public:
  // `client` must outlive this object.
  HeartbeatThread(ParameterClient& client, absl::Duration lease) {
    const auto period = absl::ToChronoMilliseconds(std::max(lease / 3, absl::Milliseconds(10)));
    thread_ = std::thread([this, &client, period] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, period, [this] { return done_; })) {
        lock.unlock();
        absl::Status s = client.Heartbeat();
        if (!s.ok()) spdlog::warn("heartbeat: {}", s.ToString());
        lock.lock();
      }
    });
  }
  ~HeartbeatThread() { Stop(); }
  // Stops the beats (before a worker leaves the job: a beat after that would be refused);
  // returns once no beat is in flight. Idempotent.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  HeartbeatThread(const HeartbeatThread&) = delete;
  HeartbeatThread& operator=(const HeartbeatThread&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace ps

#endif  // PS_WORKER_HEARTBEAT_THREAD_H_
