#include "common/base/process_tuning.h"

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

}  // namespace
}  // namespace ps
