#ifndef PS_WORKER_TASK_POOL_H_
#define PS_WORKER_TASK_POOL_H_

// A fixed set of threads that run submitted tasks, for work that recurs every training step
// (priority scheduling's pulls and pushes): starting threads per step costs more than the
// hand-off. Tasks run in submission order as threads free up; the destructor runs what is queued
// and joins.

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace ps {

class TaskPool {
 public:
  explicit TaskPool(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~TaskPool() {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // Queues `task`; its result (or exception) comes through the future.
  template <typename F>
  std::future<std::invoke_result_t<F>> Submit(F task) {
    auto packaged =
        std::make_shared<std::packaged_task<std::invoke_result_t<F>()>>(std::move(task));
    std::future<std::invoke_result_t<F>> result = packaged->get_future();
    {
      const std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back([packaged] { (*packaged)(); });
    }
    wake_.notify_one();
    return result;
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and nothing left to run
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace ps

#endif  // PS_WORKER_TASK_POOL_H_
