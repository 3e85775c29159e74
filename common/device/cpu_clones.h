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

namespace ps {

// 16 floats as one value (GCC's and Clang's vector extension): one AVX-512 register, two AVX
// ones, four SSE ones, whichever the clone compiling it has. Load and store them with memcpy (no
// alignment). Pass them by pointer between functions: by value, their ABI differs between the
// clones. Keep them in locals, never in a std::vector: its storage is not 64-byte aligned there,
// and the AVX-512 clone's aligned stores fault on it.
typedef float Lanes16 __attribute__((vector_size(16 * sizeof(float))));
constexpr int kLanes = 16;

}  // namespace ps

#endif  // PS_COMMON_DEVICE_CPU_CLONES_H_
