#include "common/codec/tensor_codec.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/base/enum_names.h"

namespace ps {

namespace {

// "f16" is an alias of "fp16".
constexpr EnumName<TensorEncoding> kEncodingNames[] = {{TensorEncoding::kF32, "f32"},
                                                       {TensorEncoding::kBf16, "bf16"},
                                                       {TensorEncoding::kF16, "fp16"},
                                                       {TensorEncoding::kF16, "f16"},
                                                       {TensorEncoding::kTopK, "topk"}};

}  // namespace

absl::StatusOr<TensorEncoding> ParseTensorEncoding(const std::string& name) {
  return ParseIn(kEncodingNames, name, "encoding");
}

std::string TensorEncodingName(TensorEncoding encoding) { return NameIn(kEncodingNames, encoding); }

absl::StatusOr<TensorEncoding> TensorEncodingFromWire(int64_t value) {
  if (value < 0 || value > static_cast<int64_t>(TensorEncoding::kTopK)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown tensor encoding ", value));
  }
  return static_cast<TensorEncoding>(value);
}

int UnitBytes(TensorEncoding encoding) {
  switch (encoding) {
    case TensorEncoding::kF32:
      return 4;
    case TensorEncoding::kBf16:
    case TensorEncoding::kF16:
      return 2;
    case TensorEncoding::kTopK:
      return 8;
  }
  return 4;
}

namespace {

uint32_t Bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}

float FromBits(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// Bit 31 of the result is set exactly when x's exponent is all ones (Inf or NaN). OR-ing it over
// a loop, instead of AND-ing bools, keeps the loop branch-free, so it vectorises.
uint32_t NonFiniteFlag(uint32_t x) { return (x & 0x7f800000u) + 0x00800000u; }

// The f32 finiteness scan is the one pass over a pushed gradient besides the update itself, and
// one core at the x86-64 baseline (SSE2) reads only about half as fast as memory delivers. GCC
// compiles this loop twice on x86-64, for AVX2 and the baseline, and the loader picks the
// copy the CPU runs (an ifunc), so the binary stays portable; 0.60 -> 0.31 ms per 16 MiB here.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PS_HOT_LOOP_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define PS_HOT_LOOP_CLONES
#endif
PS_HOT_LOOP_CLONES uint32_t NonFiniteFlagsF32(const char* data, int64_t count) {
  uint32_t flags = 0;
  for (int64_t j = 0; j < count; ++j) {
    uint32_t bits;
    std::memcpy(&bits, data + 4 * j, 4);
    flags |= NonFiniteFlag(bits);
  }
  return flags;
}

}  // namespace

uint16_t FloatToBf16(float f) {
  const uint32_t x = Bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float Bf16ToFloat(uint16_t h) { return FromBits(static_cast<uint32_t>(h) << 16); }

uint16_t FloatToF16(float f) {
  const uint32_t x = Bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u)
    return static_cast<uint16_t>(sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds beyond 65504
  if (abs < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal in units of 2^-24. Scaling by a power
    // of two is exact, and nearbyint rounds to nearest even; 1024 becomes the smallest normal.
    const float units = std::nearbyint(FromBits(abs) * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(units));
  }
  // Rebias the exponent (127 -> 15) and round the mantissa from 23 to 10 bits, to nearest even;
  // a carry out of the mantissa correctly increments the exponent.
  abs += 0xc8000fffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | (abs >> 13));
}

float F16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24
    return FromBits(Bits(magnitude) | sign);
  }
  if (exponent == 31) return FromBits(sign | 0x7f800000u | (mantissa << 13));
  return FromBits(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

EncodedTensor::EncodedTensor(TensorEncoding encoding, int64_t size, absl::Span<const char> bytes)
    : encoding_(encoding), size_(size) {
  units_ = static_cast<int64_t>(bytes.size()) / UnitBytes(encoding);
  assert(units_ * UnitBytes(encoding) == static_cast<int64_t>(bytes.size()));
  if (units_ > 0) pieces_.push_back(PayloadPiece{bytes.data(), 0, units_});
}

EncodedTensor EncodedTensor::OfFloats(absl::Span<const float> values) {
  return EncodedTensor(
      TensorEncoding::kF32, static_cast<int64_t>(values.size()),
      absl::MakeConstSpan(reinterpret_cast<const char*>(values.data()), values.size() * 4));
}

absl::StatusOr<EncodedTensor> EncodedTensor::FromChunks(
    TensorEncoding encoding, int64_t size, absl::Span<const absl::Span<const char>> chunks) {
  const int unit = UnitBytes(encoding);
  size_t total = 0;
  for (const auto& c : chunks) total += c.size();
  if (total % unit != 0) {
    return absl::InvalidArgumentError(absl::StrCat("a payload of ", total, " bytes is not whole ",
                                                   TensorEncodingName(encoding), " units"));
  }
  EncodedTensor t;
  t.encoding_ = encoding;
  t.size_ = size;
  // At most one unit straddles each chunk boundary; reserving keeps pointers into it valid.
  t.straddle_.reserve(chunks.size() * unit);
  char carry[8];
  int carry_len = 0;
  int64_t next = 0;
  for (const auto& c : chunks) {
    const char* p = c.data();
    size_t left = c.size();
    if (carry_len > 0 && left > 0) {
      const size_t take = std::min<size_t>(unit - carry_len, left);
      std::memcpy(carry + carry_len, p, take);
      carry_len += static_cast<int>(take);
      p += take;
      left -= take;
      if (carry_len == unit) {
        const size_t at = t.straddle_.size();
        t.straddle_.insert(t.straddle_.end(), carry, carry + unit);
        t.pieces_.push_back(PayloadPiece{t.straddle_.data() + at, next++, 1});
        carry_len = 0;
      }
    }
    const int64_t whole = static_cast<int64_t>(left / unit);
    if (whole > 0) {
      t.pieces_.push_back(PayloadPiece{p, next, whole});
      next += whole;
      p += whole * unit;
      left -= whole * unit;
    }
    if (left > 0) {
      std::memcpy(carry, p, left);
      carry_len = static_cast<int>(left);
    }
  }
  t.units_ = next;
  return t;
}

absl::Status EncodedTensor::CheckShape(const char* what) const {
  if (dense()) {
    if (units_ != size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " has ", units_, " ", TensorEncodingName(encoding_), " values, want ", size_));
    }
    return absl::OkStatus();
  }
  if (units_ > size_) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " names ", units_, " elements of a slice of ", size_));
  }
  int64_t previous = -1;
  for (const PayloadPiece& piece : pieces_) {
    for (int64_t j = 0; j < piece.count; ++j) {
      uint32_t index;
      std::memcpy(&index, piece.data + 8 * j, 4);
      if (static_cast<int64_t>(index) <= previous || static_cast<int64_t>(index) >= size_) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": top-k index ", index, " is not increasing or not below ", size_));
      }
      previous = index;
    }
  }
  return absl::OkStatus();
}

bool EncodedTensor::AllFinite() const {
  uint32_t flags = 0;
  if (dense()) {
    DispatchDense(encoding_, [&](auto e) {
      for (const PayloadPiece& piece : pieces_) {
        if constexpr (decltype(e)::value == TensorEncoding::kF32) {
          flags |= NonFiniteFlagsF32(piece.data, piece.count);
        } else {
          uint32_t piece_flags = 0;  // a local: `flags` might alias piece.data, blocking SIMD
          for (int64_t j = 0; j < piece.count; ++j) {
            piece_flags |= NonFiniteFlag(Bits(LoadElement<decltype(e)::value>(piece.data, j)));
          }
          flags |= piece_flags;
        }
      }
    });
  } else {
    for (const PayloadPiece& piece : pieces_) {
      for (int64_t j = 0; j < piece.count; ++j) {
        uint32_t bits;
        std::memcpy(&bits, piece.data + 8 * j + 4, 4);
        flags |= NonFiniteFlag(bits);
      }
    }
  }
  return (flags >> 31) == 0;
}

void EncodedTensor::DecodeInto(absl::Span<float> out) const {
  assert(static_cast<int64_t>(out.size()) == size_);
  if (encoding_ == TensorEncoding::kF32) {  // a copy: memcpy is faster than any loop of ours
    for (const PayloadPiece& piece : pieces_) {
      std::memcpy(out.data() + piece.first, piece.data, piece.count * 4);
    }
    return;
  }
  if (dense()) {
    DispatchDense(encoding_, [&](auto e) {
      for (const PayloadPiece& piece : pieces_) {
        float* dst = out.data() + piece.first;
        for (int64_t j = 0; j < piece.count; ++j)
          dst[j] = LoadElement<decltype(e)::value>(piece.data, j);
      }
    });
    return;
  }
  std::fill(out.begin(), out.end(), 0.0f);
  for (const PayloadPiece& piece : pieces_) {
    for (int64_t j = 0; j < piece.count; ++j) {
      uint32_t index;
      std::memcpy(&index, piece.data + 8 * j, 4);
      std::memcpy(&out[index], piece.data + 8 * j + 4, 4);
    }
  }
}

void EncodeDense(TensorEncoding encoding, absl::Span<const float> values, char* out) {
  switch (encoding) {
    case TensorEncoding::kF32:
      std::memcpy(out, values.data(), values.size() * 4);
      return;
    case TensorEncoding::kBf16:
      for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t h = FloatToBf16(values[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case TensorEncoding::kF16:
      for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t h = FloatToF16(values[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case TensorEncoding::kTopK:
      assert(false && "top-k is not a dense encoding");
      return;
  }
}

TopKCompressor::TopKCompressor(int64_t size, double ratio) : ratio_(ratio), residual_(size, 0.0f) {
  assert(ratio > 0.0 && ratio <= 1.0);
}

int64_t TopKCompressor::KFor(int64_t n) const {
  if (n <= 0) return 0;
  return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(ratio_ * static_cast<double>(n))), 1,
                             n);
}

namespace {

// |x| as its bit pattern: non-negative floats order as their patterns do as unsigned integers.
uint32_t MagnitudeBits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return bits & 0x7fffffffu;
}

// The digits of a magnitude's 31 bits for the radix select, most significant first: the top one
// (the exponent and 3 bits of the mantissa) over the whole range, the others over the magnitudes
// that share the top digit of the k-th largest. Each count table stays in the L1 cache.
struct Digit {
  int shift;
  int bits;
};
constexpr Digit kTopDigit = {20, 11};
constexpr Digit kLowerDigits[] = {{9, 11}, {0, 9}};

// The digit value at which the counts, summed from the largest value down, reach `rank`; leaves
// in `rank` the rank still wanted among the magnitudes with that value.
uint32_t DigitAtRank(const std::vector<uint32_t>& counts, int64_t* rank) {
  uint32_t value = static_cast<uint32_t>(counts.size()) - 1;
  while (value > 0 && static_cast<int64_t>(counts[value]) < *rank) *rank -= counts[value--];
  return value;
}

}  // namespace

int64_t TopKCompressor::Compress(absl::Span<const float> gradient, int64_t begin, int64_t end,
                                 std::vector<char>* out) {
  assert(0 <= begin && begin <= end && end <= static_cast<int64_t>(residual_.size()));
  float* r = residual_.data() + begin;
  const float* g = gradient.data() + begin;
  const int64_t n = end - begin;
  const int64_t k = KFor(n);
  // Allocated at the first push: a compressor that is never used costs one residual.
  if (before_.empty()) before_.resize(residual_.size());
  float* before = before_.data() + begin;
  // The k-th largest magnitude by a radix select, digit by digit from the top. This pass keeps
  // the range as it was (Restore), adds the gradient and counts the top digits; the next one
  // gathers the magnitudes that share the chosen top digit, a small share of the range, and the
  // lower digits are chosen among those alone. Three passes over the range in all (with the one
  // that sends), and no comparisons through indices (docs/performance.md, Results: compression).
  const uint32_t top_mask = (uint32_t{1} << kTopDigit.bits) - 1;
  counts_.assign(size_t{top_mask} + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    before[i] = r[i];
    r[i] += g[i];
    ++counts_[MagnitudeBits(r[i]) >> kTopDigit.shift];
  }
  int64_t rank = k;  // the k-th largest is the rank-th largest of the magnitudes that agree so far
  uint32_t threshold = DigitAtRank(counts_, &rank) << kTopDigit.shift;  // its digits so far
  uint32_t chosen = top_mask << kTopDigit.shift;                        // the mask of those
  candidates_.clear();
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t m = MagnitudeBits(r[i]);
    if ((m & chosen) == threshold) candidates_.push_back(m);
  }
  for (const Digit& digit : kLowerDigits) {
    const uint32_t mask = (uint32_t{1} << digit.bits) - 1;
    counts_.assign(size_t{mask} + 1, 0);
    for (uint32_t m : candidates_) {
      if ((m & chosen) == threshold) ++counts_[(m >> digit.shift) & mask];
    }
    threshold |= DigitAtRank(counts_, &rank) << digit.shift;
    chosen |= mask << digit.shift;
  }
  // Sent, in index order: every magnitude above the k-th largest, and the first `rank` equal to
  // it (ties go to the lowest indices).
  out->resize(static_cast<size_t>(k) * 8);
  char* p = out->data();
  int64_t sent = 0;
  for (int64_t i = 0; i < n && sent < k; ++i) {
    const uint32_t m = MagnitudeBits(r[i]);
    if (m < threshold || (m == threshold && rank-- <= 0)) continue;
    const uint32_t index = static_cast<uint32_t>(i);
    std::memcpy(p + 8 * sent, &index, 4);
    std::memcpy(p + 8 * sent + 4, &r[i], 4);
    r[i] = 0.0f;  // sent: the residual keeps only what was held back
    ++sent;
  }
  assert(sent == k);
  return k;
}

void TopKCompressor::Restore(int64_t begin, int64_t end) {
  assert(0 <= begin && begin <= end && end <= static_cast<int64_t>(residual_.size()));
  if (before_.empty()) return;  // nothing compressed yet
  std::copy(before_.begin() + begin, before_.begin() + end, residual_.begin() + begin);
}

}  // namespace ps
