#include "common/base/process_tuning.h"

#include <malloc.h>

#include "absl/synchronization/mutex.h"

namespace ps {

void TuneProcessForTensorTraffic() {
  TuneMallocForLargeMessages();
  TurnOffLockOrderChecks();
}

void TuneMallocForLargeMessages() {
#if defined(__GLIBC__)
  // 32 MiB is glibc's largest mmap threshold on 64-bit; anything below it comes from the heap.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  // One arena: the thresholds above govern only the main arena's heap. The other arenas' heaps
  // (64 MiB mappings, one set per busy thread) are unmapped as soon as they empty, whatever the
  // trim threshold, and gRPC's receive buffers, filled on one thread and freed on another, empty
  // them on every large message.
  mallopt(M_ARENA_MAX, 1);
#endif
}

void TurnOffLockOrderChecks() {
#ifdef NDEBUG
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
}

}  // namespace ps
