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
  // One arena: a thread's own arena grows in heaps of 64 MiB mappings and unmaps a whole heap as
  // soon as it empties, whatever the trim threshold; gRPC's receive buffers, filled on one thread
  // and freed on another, emptied one on every large message. The main arena has no such heaps.
  mallopt(M_ARENA_MAX, 1);
#endif
}

void TurnOffLockOrderChecks() {
#ifdef NDEBUG
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
}

}  // namespace ps
