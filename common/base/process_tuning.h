#ifndef PS_COMMON_BASE_PROCESS_TUNING_H_
#define PS_COMMON_BASE_PROCESS_TUNING_H_

namespace ps {

// Process-wide settings of the libraries below us that cost a process moving tensors more than
// they give it. Called first thing by every binary that moves tensors, before any thread starts:
// TuneMallocForLargeMessages() and, in release builds, TurnOffLockOrderChecks().
void TuneProcessForTensorTraffic();

// Keeps glibc malloc from returning freed memory to the kernel on every large message. By
// default, blocks above 128 KiB are mmap'ed and freed heap tops are trimmed, and each busy thread
// gets an arena of its own whose extra heaps are unmapped as soon as they empty; so every message
// of megabytes is paid for again in page faults on its next allocation (gRPC's receive buffers,
// filled on one thread and freed on another; the slices of pull replies). On this project's VMs a
// page fault costs 12-17 us (`ps_bench_transport`'s "page_fault" line), more than copying the
// page: a raw, zero-copy gRPC call of 1 MiB moved 0.3 GB/s with glibc's defaults and 1.07 GB/s
// with the thresholds set, and the single arena took the remaining steady-state faults of 16 and
// 64 MiB transfers from up to 295 per call to none (docs/performance.md). Blocks of 32 MiB or more
// are still mapped afresh: glibc allows no higher threshold. The memory a process has touched
// stays mapped: a shard's resident size is its high-water mark. One arena serialises large
// allocations across threads; small ones come from each thread's cache without the lock.
void TuneMallocForLargeMessages();

// Turns off absl::Mutex's lock-order (deadlock) checks when this project is built with NDEBUG
// (Release, RelWithDebInfo); a no-op otherwise. Debian builds Abseil without NDEBUG, so its
// Mutex records every lock in a process-wide graph, under one global spin lock, and aborts on a
// lock-order inversion: a debugging aid that gRPC's own locks (absl::Mutex too) pay on every
// call. Debug builds, the sanitizer build among them, keep the checks, so the tests still abort
// on an inversion. Safe to call more than once; best called before other threads lock anything.
void TurnOffLockOrderChecks();

}  // namespace ps

#endif  // PS_COMMON_BASE_PROCESS_TUNING_H_
