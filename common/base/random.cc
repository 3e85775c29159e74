#include "common/base/random.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

namespace ps {

uint64_t Rng::NextU64() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Rng Rng::FromKeys(std::initializer_list<uint64_t> keys) {
  Rng mixer(0x6a09e667f3bcc909ULL);
  uint64_t state = 0;
  for (uint64_t k : keys) {
    mixer.state_ ^= k;
    state = mixer.NextU64();
  }
  return Rng(state);
}

uint64_t Rng::Below(uint64_t n) {
  // Rejection sampling over the largest multiple of n that fits in 64 bits.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = NextU64();
  } while (x >= limit);
  return x % n;
}

double UniformOpen(Rng& rng) { return (static_cast<double>(rng.NextU64() >> 11) + 0.5) * 0x1p-53; }

double StandardNormal(Rng& rng) {
  const double u = UniformOpen(rng), v = UniformOpen(rng);
  return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * M_PI * v);
}

int64_t ZipfRank(Rng& rng, int64_t n, double exponent) {
  const double a = 1.0 - exponent;
  const double top = std::pow(static_cast<double>(n) + 1.0, a);
  const double x = std::pow(1.0 + (top - 1.0) * UniformOpen(rng), 1.0 / a) - 1.0;
  return std::clamp(static_cast<int64_t>(x), int64_t{0}, n - 1);
}

std::vector<int32_t> Permutation(int32_t n, Rng& rng) {
  std::vector<int32_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  for (int32_t i = n - 1; i > 0; --i) {
    std::swap(p[i], p[rng.Below(static_cast<uint64_t>(i) + 1)]);
  }
  return p;
}

}  // namespace ps
