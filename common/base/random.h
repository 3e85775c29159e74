#ifndef PS_COMMON_BASE_RANDOM_H_
#define PS_COMMON_BASE_RANDOM_H_

// A small deterministic generator (SplitMix64). Unlike the <random> distributions, its outputs
// are fixed by this code alone, so the same seed gives the same weights and sample order on
// every platform and standard library: workers depend on it to agree without talking.

#include <cstdint>
#include <initializer_list>
#include <vector>

namespace ps {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  // Seeds from several words, e.g. (seed, rank, step), mixing each in.
  static Rng FromKeys(std::initializer_list<uint64_t> keys);

  uint64_t NextU64();
  // Uniform in [0, 1) with 24 random bits.
  float NextFloat() { return static_cast<float>(NextU64() >> 40) * (1.0f / 16777216.0f); }
  // Uniform in [lo, hi).
  float Uniform(float lo, float hi) { return lo + (hi - lo) * NextFloat(); }
  // Uniform integer in [0, n) without modulo bias; n > 0.
  uint64_t Below(uint64_t n);

 private:
  uint64_t state_;
};

// SplitMix64's finaliser: a bijection of 64-bit words whose every output bit depends on every
// input bit. Chained (Mix64(Mix64(a) ^ b)) it hashes tuples; unlike Rng::FromKeys, which folds
// its keys into one state before a single mix, so that some tuples of small keys collide.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in (0, 1) with 53 random bits (never 0, so its log is finite).
double UniformOpen(Rng& rng);

// A standard normal draw (Box-Muller).
double StandardNormal(Rng& rng);

// A popularity rank in [0, n), n >= 1: the continuous power law of `exponent` (> 0, != 1) cut at
// n and inverted, so rank r is drawn about (r + 1)^-exponent as often as rank 0 (Zipf's law).
int64_t ZipfRank(Rng& rng, int64_t n, double exponent);

// A permutation of [0, n) by Fisher-Yates with `rng`.
std::vector<int32_t> Permutation(int32_t n, Rng& rng);

}  // namespace ps

#endif  // PS_COMMON_BASE_RANDOM_H_
