#ifndef PS_COMMON_DEVICE_CPU_CLONES_H_
#define PS_COMMON_DEVICE_CPU_CLONES_H_

// PS_CPU_CLONES before a free function compiles it for the baseline x86-64 (SSE2), AVX2 and
// AVX-512, and the CPU's best clone is chosen when the program loads (GCC's function
// multi-versioning; virtual functions cannot be cloned, so CpuDevice's ops call cloned loops).
// The baseline's 4 lanes left GELU and attention at a half to a third of their speed with 16.
// Files using it are built with -ffp-contract=off, so no clone fuses a multiply-add and every
// clone gives the same bits: vectorising an elementwise loop does not change its arithmetic,
// and GCC never reorders a float reduction without -ffast-math.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PS_CPU_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define PS_CPU_CLONES
#endif

#endif  // PS_COMMON_DEVICE_CPU_CLONES_H_
