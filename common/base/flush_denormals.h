#ifndef PS_COMMON_BASE_FLUSH_DENORMALS_H_
#define PS_COMMON_BASE_FLUSH_DENORMALS_H_

// While one of these lives, the calling thread's float arithmetic flushes denormal results to
// zero and reads denormal operands as zero (x86's MXCSR FTZ and DAZ bits); the thread's previous
// mode comes back when it goes. Elsewhere than on x86 it does nothing.
//
// Why: an optimizer's state decays geometrically where a parameter's gradient stays zero (Adam's
// moments by beta1 and beta2 per update), into the denormal range below 1.2e-38, where each
// multiplication takes a microcode assist many times slower than a normal one. Flushing them
// changes an update by far less than Adam's epsilon does (sqrt(1.2e-38) is 1.1e-19 against
// epsilon 1e-8), as TensorFlow's kernels and PyTorch's torch.set_flush_denormal(True) accept.
// Every update of a shard's slice or table runs under one, so replays and restarts compute the
// same bits.

#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#define PS_HAVE_MXCSR 1
#endif

namespace ps {

class ScopedFlushDenormals {
 public:
#ifdef PS_HAVE_MXCSR
  ScopedFlushDenormals() : saved_(_mm_getcsr()) {
    _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero);
  }
  ~ScopedFlushDenormals() { _mm_setcsr(saved_); }
#else
  ScopedFlushDenormals() = default;
#endif
  ScopedFlushDenormals(const ScopedFlushDenormals&) = delete;
  ScopedFlushDenormals& operator=(const ScopedFlushDenormals&) = delete;

 private:
#ifdef PS_HAVE_MXCSR
  static constexpr unsigned kFlushToZero = 0x8000;       // MXCSR bit 15
  static constexpr unsigned kDenormalsAreZero = 0x0040;  // MXCSR bit 6
  const unsigned saved_;
#endif
};

}  // namespace ps

#endif  // PS_COMMON_BASE_FLUSH_DENORMALS_H_
