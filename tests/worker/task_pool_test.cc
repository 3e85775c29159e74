#include "worker/task_pool.h"

#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(TaskPool, RunsTasksOnItsOwnThreadsAndHandsBackTheirResults) {
  TaskPool pool(2);
  std::vector<std::future<std::thread::id>> ids;
  for (int i = 0; i < 20; ++i) {
    ids.push_back(pool.Submit([] { return std::this_thread::get_id(); }));
  }
  std::set<std::thread::id> seen;
  for (auto& id : ids) seen.insert(id.get());
  EXPECT_EQ(seen.count(std::this_thread::get_id()), 0u);
  EXPECT_LE(seen.size(), 2u);  // the same two threads, whatever the number of tasks
  EXPECT_EQ(pool.Submit([] { return 6 * 7; }).get(), 42);
}

// Two tasks that wait for each other finish only if they run at once: a pool of two must.
TEST(TaskPool, TasksRunConcurrentlyUpToItsThreads) {
  TaskPool pool(2);
  std::atomic<int> arrived{0};
  const auto meet = [&] {
    ++arrived;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (arrived.load() < 2 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::yield();
    }
    return arrived.load() == 2;
  };
  auto a = pool.Submit(meet);
  auto b = pool.Submit(meet);
  EXPECT_TRUE(a.get());
  EXPECT_TRUE(b.get());
}

TEST(TaskPool, DestructionRunsWhatIsQueuedAndAnExceptionReachesTheFuture) {
  std::atomic<int> ran{0};
  std::future<void> failing;
  {
    TaskPool pool(1);
    for (int i = 0; i < 10; ++i) pool.Submit([&] { ++ran; });
    failing = pool.Submit([]() -> void { throw std::runtime_error("boom"); });
  }
  EXPECT_EQ(ran.load(), 10);
  EXPECT_THROW(failing.get(), std::runtime_error);
}

}  // namespace
}  // namespace ps
