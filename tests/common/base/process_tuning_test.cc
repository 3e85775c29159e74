#include "common/base/process_tuning.h"

#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

// Two mutexes taken in both orders: a potential deadlock that Abseil's checks, when on, answer
// by aborting the process ("dying due to potential deadlock").
void LockInBothOrders() {
  absl::Mutex a;
  absl::Mutex b;
  {
    absl::MutexLock lock_a(&a);
    absl::MutexLock lock_b(&b);
  }
  {
    absl::MutexLock lock_b(&b);
    absl::MutexLock lock_a(&a);
  }
}

// Release builds turn the checks off (Debian's Abseil has them on); debug builds, the sanitizer
// build among them, keep them, so tests there still abort on an inversion.
TEST(ProcessTuning, LockOrderChecksAreOffExactlyInReleaseBuilds) {
  TurnOffLockOrderChecks();
#ifdef NDEBUG
  LockInBothOrders();  // aborts the test binary if the checks were still on
#else
  EXPECT_DEATH(LockInBothOrders(), "potential deadlock");
#endif
}

// The calling thread's minor page faults so far.
long ThreadMinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt;
}

// Three blocks of 24 MiB (72 MiB, more than one 64 MiB heap of a thread's own arena holds),
// written, then freed, twice for warm-up and then 10 times: the page faults of those 10 rounds
// on the calling thread. The shape of gRPC's receive buffers for large messages.
long FaultsOfLargeBlocksComingAndGoing() {
  constexpr size_t kBytes = size_t{24} << 20;
  const auto round = [] {
    char* blocks[3];
    for (char*& block : blocks) {
      block = static_cast<char*>(std::malloc(kBytes));
      std::memset(block, 1, kBytes);
      asm volatile("" : : "r"(block) : "memory");  // keeps the block and its writes
    }
    for (char* block : blocks) std::free(block);
  };
  round();
  round();
  const long before = ThreadMinorFaults();
  for (int i = 0; i < 10; ++i) round();
  return ThreadMinorFaults() - before;
}

// glibc's defaults map blocks this size afresh on every allocation (the main thread: all 18 432
// pages a round) and unmap a thread arena's extra heaps as soon as they empty, whatever the trim
// threshold (another thread: 61 450 faults in the 10 rounds with the thresholds set and the
// arenas left alone). Tuned, the blocks come back from memory the process keeps.
TEST(ProcessTuning, LargeBlocksFreedAndTakenAgainCostNoPageFaults) {
#if defined(__SANITIZE_ADDRESS__) || !defined(__GLIBC__)
  GTEST_SKIP() << "glibc's allocator only (ASan brings its own)";
#endif
  TuneMallocForLargeMessages();
  EXPECT_EQ(FaultsOfLargeBlocksComingAndGoing(), 0);
  long other_thread = -1;
  std::thread([&] { other_thread = FaultsOfLargeBlocksComingAndGoing(); }).join();
  EXPECT_EQ(other_thread, 0);
}

}  // namespace
}  // namespace ps
