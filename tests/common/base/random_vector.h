#ifndef PS_TESTS_COMMON_BASE_RANDOM_VECTOR_H_
#define PS_TESTS_COMMON_BASE_RANDOM_VECTOR_H_

// Deterministic test inputs shared by the layer and device tests.

#include <cstdint>
#include <vector>

#include "common/base/random.h"

namespace ps {

inline std::vector<float> RandomVector(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.Uniform(lo, hi);
  return v;
}

}  // namespace ps

#endif  // PS_TESTS_COMMON_BASE_RANDOM_VECTOR_H_
