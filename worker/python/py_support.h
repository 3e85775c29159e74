#ifndef PS_WORKER_PYTHON_PY_SUPPORT_H_
#define PS_WORKER_PYTHON_PY_SUPPORT_H_

// What the extension's C++ needs to meet Python: errors on their way to ps_train.PsError, and
// calls that wait on the shards without blocking Python's signals.

#include <pybind11/pybind11.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ps {

namespace py = pybind11;

// An absl::Status on its way to Python (translated to ps_train.PsError).
struct StatusError {
  absl::Status status;
};

inline void ThrowIfError(const absl::Status& s) {
  if (!s.ok()) throw StatusError{s};
}
template <typename T>
T ValueOrThrow(absl::StatusOr<T> v) {
  if (!v.ok()) throw StatusError{v.status()};
  return *std::move(v);
}

// Runs calls that may wait on the shards on a thread of its own while the calling thread, without
// the GIL, checks Python's signals every 50 ms: on a signal, `cancel` stops the call, the call is
// waited for and the signal's exception (KeyboardInterrupt, SystemExit, ...) propagates. One
// thread for all calls: starting a thread per call cost about 0.1 ms a step. Calls from several
// Python threads take turns.
class CallThread {
 public:
  CallThread() : thread_([this] { Loop(); }) {}
  ~CallThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  CallThread(const CallThread&) = delete;
  CallThread& operator=(const CallThread&) = delete;

  template <typename R>
  R Call(const std::function<R()>& call, const std::function<void()>& cancel) {
    std::optional<R> result;
    std::unique_lock<std::mutex> turn(turn_, std::defer_lock);
    {
      py::gil_scoped_release unlocked;
      turn.lock();
      std::lock_guard<std::mutex> lock(mu_);
      job_ = [&result, &call] { result.emplace(call()); };
      finished_ = false;
    }
    cv_.notify_all();
    for (;;) {
      {
        py::gil_scoped_release unlocked;
        std::unique_lock<std::mutex> lock(mu_);
        if (cv_.wait_for(lock, std::chrono::milliseconds(50), [this] { return finished_; })) break;
      }
      if (PyErr_CheckSignals() != 0) {
        cancel();
        {
          py::gil_scoped_release unlocked;
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, [this] { return finished_; });
        }
        throw py::error_already_set();
      }
    }
    return *std::move(result);
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return done_ || job_ != nullptr; });
      if (job_ == nullptr) return;  // done
      std::function<void()> job = std::move(job_);
      job_ = nullptr;
      lock.unlock();
      job();
      lock.lock();
      finished_ = true;
      cv_.notify_all();
    }
  }

  std::mutex turn_;  // held by the Python thread whose call is running
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool finished_ = true;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace ps

#endif  // PS_WORKER_PYTHON_PY_SUPPORT_H_
