#ifndef PS_COMMON_BASE_MALLOC_TUNING_H_
#define PS_COMMON_BASE_MALLOC_TUNING_H_

namespace ps {

// Keeps glibc malloc from returning freed memory to the kernel on every large message. By
// default, blocks above 128 KiB are mmap'ed and freed heap tops are trimmed, so every message of
// megabytes is paid for again in page faults on its next allocation (gRPC's receive buffers, the
// slices of pull replies); on this project's VMs that costs more than the copy itself (a raw,
// zero-copy gRPC call of 1 MiB moved 0.3 GB/s with glibc's defaults and 1.07 GB/s with these
// settings, measured with a standalone prototype before ps_bench_transport existed; perf showed
// page faults on top). Called first thing by every
// binary that moves tensors. The memory a process has touched stays mapped: a shard's resident
// size is its high-water mark.
void TuneMallocForLargeMessages();

}  // namespace ps

#endif  // PS_COMMON_BASE_MALLOC_TUNING_H_
