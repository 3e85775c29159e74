#include "common/codec/tensor_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "common/optim/optimizer.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

uint32_t BitsOf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}

TEST(TensorCodec, ParsesAndNamesEncodings) {
  EXPECT_EQ(*ParseTensorEncoding("bf16"), TensorEncoding::kBf16);
  EXPECT_EQ(*ParseTensorEncoding("fp16"), TensorEncoding::kF16);
  EXPECT_EQ(*ParseTensorEncoding("topk"), TensorEncoding::kTopK);
  EXPECT_EQ(ParseTensorEncoding("int8").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TensorEncodingFromWire(4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TensorEncodingName(TensorEncoding::kF16), "fp16");
}

TEST(TensorCodec, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to the even one (1.0).
  EXPECT_EQ(FloatToBf16(1.00390625f), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(FloatToBf16(1.01171875f), 0x3f82);
  EXPECT_EQ(Bf16ToFloat(0xc040), -3.0f);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(TensorCodec, F16ExactValuesAndRounding) {
  EXPECT_EQ(FloatToF16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToF16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToF16(65504.0f), 0x7bff);                // largest half
  EXPECT_EQ(FloatToF16(65520.0f), 0x7c00);                // rounds up to Inf
  EXPECT_EQ(FloatToF16(5.9604644775390625e-8f), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToF16(6.103515625e-05f), 0x0400);        // smallest normal
  EXPECT_EQ(FloatToF16(1.0f + 1.0f / 2048), 0x3c00);      // halfway: to even
  EXPECT_EQ(FloatToF16(1.0f + 3.0f / 2048), 0x3c02);      // halfway: to even (up)
  EXPECT_EQ(F16ToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(F16ToFloat(0x0001), 5.9604644775390625e-8f);
  EXPECT_TRUE(std::isinf(F16ToFloat(0x7c00)));
  EXPECT_TRUE(std::isnan(F16ToFloat(FloatToF16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(TensorCodec, F16RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) continue;  // NaNs: payload not kept
    EXPECT_EQ(FloatToF16(F16ToFloat(static_cast<uint16_t>(h))), h) << h;
  }
}

TEST(TensorCodec, ConversionErrorIsWithinHalfAnUlp) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
  for (int i = 0; i < 10000; ++i) {
    const float x = dist(rng);
    EXPECT_LE(std::fabs(Bf16ToFloat(FloatToBf16(x)) - x), std::fabs(x) * (1.0f / 256)) << x;
    EXPECT_LE(std::fabs(F16ToFloat(FloatToF16(x)) - x), std::fabs(x) * (1.0f / 2048)) << x;
  }
}

// Splits `bytes` at the given offsets into chunks, as a transport might.
std::vector<absl::Span<const char>> Chunks(const std::vector<char>& bytes,
                                           const std::vector<size_t>& cuts) {
  std::vector<absl::Span<const char>> out;
  size_t at = 0;
  for (size_t cut : cuts) {
    out.emplace_back(bytes.data() + at, cut - at);
    at = cut;
  }
  out.emplace_back(bytes.data() + at, bytes.size() - at);
  return out;
}

TEST(EncodedTensor, ChunksSplitMidElementDecodeExactly) {
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 4.0f, -5.5f};
  std::vector<char> bytes(values.size() * 4);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  // Cuts inside elements 0, 1 (twice) and 3, and an empty chunk.
  auto t = EncodedTensor::FromChunks(TensorEncoding::kF32, 5, Chunks(bytes, {3, 5, 7, 7, 13}));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->units(), 5);
  ASSERT_TRUE(t->CheckShape("g").ok());
  std::vector<float> out(5);
  t->DecodeInto(absl::MakeSpan(out));
  EXPECT_EQ(out, values);
  // A view that is moved keeps pointing at valid storage.
  EncodedTensor moved = std::move(*t);
  std::fill(out.begin(), out.end(), 0.0f);
  moved.DecodeInto(absl::MakeSpan(out));
  EXPECT_EQ(out, values);
}

TEST(EncodedTensor, RejectsPartialUnitsWrongLengthsAndNonFinite) {
  std::vector<char> bytes(10);
  EXPECT_EQ(EncodedTensor::FromChunks(TensorEncoding::kF32, 3, Chunks(bytes, {})).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<float> three = {1, 2, 3};
  EXPECT_EQ(EncodedTensor::OfFloats(three).CheckShape("g").code(), absl::StatusCode::kOk);
  EncodedTensor wrong(TensorEncoding::kF32, 4,
                      absl::MakeConstSpan(reinterpret_cast<const char*>(three.data()), 12));
  EXPECT_EQ(wrong.CheckShape("g").code(), absl::StatusCode::kInvalidArgument);
  const std::vector<float> inf = {1, std::numeric_limits<float>::infinity(), 3};
  EXPECT_FALSE(EncodedTensor::OfFloats(inf).AllFinite());
  EXPECT_TRUE(EncodedTensor::OfFloats(three).AllFinite());
  const uint16_t half_nan[2] = {0x3c00, 0x7e00};
  EncodedTensor h(TensorEncoding::kF16, 2,
                  absl::MakeConstSpan(reinterpret_cast<const char*>(half_nan), 4));
  EXPECT_FALSE(h.AllFinite());
}

// The f32 scan runs in vector lanes (AVX2 where the CPU has it) with a scalar tail: a NaN, an
// Inf or a -Inf anywhere in 67 elements is found, in one piece or in a piece of a split payload,
// and the largest finite values and the smallest subnormal are not taken for one.
TEST(EncodedTensor, AllFiniteFindsANonFiniteValueAtEveryPosition) {
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  std::vector<float> values(67);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = i % 2 == 0 ? std::numeric_limits<float>::max() : -std::numeric_limits<float>::max();
  }
  values[5] = std::numeric_limits<float>::denorm_min();
  ASSERT_TRUE(EncodedTensor::OfFloats(values).AllFinite());
  for (float special : specials) {
    for (size_t at = 0; at < values.size(); ++at) {
      std::vector<float> v = values;
      v[at] = special;
      EXPECT_FALSE(EncodedTensor::OfFloats(v).AllFinite()) << at;
      const char* bytes = reinterpret_cast<const char*>(v.data());
      const std::vector<absl::Span<const char>> pieces = {absl::MakeConstSpan(bytes, 4 * 40),
                                                          absl::MakeConstSpan(bytes + 160, 4 * 27)};
      auto split = EncodedTensor::FromChunks(TensorEncoding::kF32, 67, pieces);
      ASSERT_TRUE(split.ok()) << split.status();
      EXPECT_FALSE(split->AllFinite()) << at;
    }
  }
}

std::vector<char> Pairs(const std::vector<std::pair<uint32_t, float>>& pairs) {
  std::vector<char> out(pairs.size() * 8);
  for (size_t i = 0; i < pairs.size(); ++i) {
    std::memcpy(out.data() + 8 * i, &pairs[i].first, 4);
    std::memcpy(out.data() + 8 * i + 4, &pairs[i].second, 4);
  }
  return out;
}

TEST(EncodedTensor, TopKDecodesAndChecksIndices) {
  const std::vector<char> ok = Pairs({{1, 2.0f}, {3, -1.0f}});
  EncodedTensor t(TensorEncoding::kTopK, 4, ok);
  ASSERT_TRUE(t.CheckShape("g").ok());
  std::vector<float> out(4, 9.0f);
  t.DecodeInto(absl::MakeSpan(out));
  EXPECT_EQ(out, (std::vector<float>{0.0f, 2.0f, 0.0f, -1.0f}));
  const std::vector<char> repeated = Pairs({{1, 2.0f}, {1, 1.0f}});
  EXPECT_EQ(EncodedTensor(TensorEncoding::kTopK, 4, repeated).CheckShape("g").code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<char> beyond = Pairs({{4, 2.0f}});
  EXPECT_EQ(EncodedTensor(TensorEncoding::kTopK, 4, beyond).CheckShape("g").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TopKCompressor, SendsLargestAndFeedsBackTheRest) {
  TopKCompressor c(4, 0.5);  // 2 of 4 per step
  std::vector<char> out;
  const std::vector<float> g = {0.1f, -3.0f, 0.2f, 2.0f};
  ASSERT_EQ(c.Compress(g, 0, 4, &out), 2);
  EncodedTensor t(TensorEncoding::kTopK, 4, out);
  std::vector<float> sent(4);
  t.DecodeInto(absl::MakeSpan(sent));
  EXPECT_EQ(sent, (std::vector<float>{0.0f, -3.0f, 0.0f, 2.0f}));
  EXPECT_EQ(std::vector<float>(c.residual().begin(), c.residual().end()),
            (std::vector<float>{0.1f, 0.0f, 0.2f, 0.0f}));
  // Next step: the held-back 0.2 plus 0.2 now outweighs the new values.
  const std::vector<float> g2 = {0.0f, 0.05f, 0.2f, 0.0f};
  ASSERT_EQ(c.Compress(g2, 0, 4, &out), 2);
  EncodedTensor t2(TensorEncoding::kTopK, 4, out);
  t2.DecodeInto(absl::MakeSpan(sent));
  EXPECT_FLOAT_EQ(sent[2], 0.4f);
  EXPECT_FLOAT_EQ(sent[0], 0.1f);
  // Sent plus residual equals everything pushed so far: nothing is lost.
  EXPECT_FLOAT_EQ(c.residual()[1], 0.05f);
}

TEST(TopKCompressor, WorksOnASubrangeWithRelativeIndices) {
  TopKCompressor c(6, 1.0 / 3);
  std::vector<char> out;
  const std::vector<float> g = {9, 9, 9, 1, -5, 2};
  ASSERT_EQ(c.Compress(g, 3, 6, &out), 1);
  uint32_t index;
  float value;
  std::memcpy(&index, out.data(), 4);
  std::memcpy(&value, out.data() + 4, 4);
  EXPECT_EQ(index, 1u);  // element 4 of the whole, 1 of the range
  EXPECT_EQ(value, -5.0f);
  EXPECT_EQ(c.residual()[0], 0.0f);  // outside the range: untouched
}

// The selection against a sort: exactly the k largest magnitudes, ties at the cut to the lowest
// indices, in index order, with their signs; the residual keeps the rest. The values come from a
// small set (many ties) with signed zeros, subnormals, huge values and infinities, at sizes
// from 1 to past one digit's 2048 values.
TEST(TopKCompressor, SendsTheKLargestMagnitudesAndTiesGoToTheLowestIndices) {
  const float kValues[] = {0.0f,
                           -0.0f,
                           1e-40f,
                           -1e-40f,
                           0.5f,
                           -0.5f,
                           1.0f,
                           -1.0f,
                           3e38f,
                           -3e38f,
                           1.5f,
                           -2.0f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity()};
  std::mt19937 rng(7);
  for (int64_t n : {1, 2, 3, 17, 1000, 5003}) {
    for (double ratio : {1e-6, 0.01, 0.3, 1.0}) {
      std::vector<float> g(n);
      for (float& v : g) v = kValues[rng() % (n < 20 ? 6 : std::size(kValues))];
      std::vector<float> residual(n);  // 0 + g: what the compressor selects from (no -0)
      for (int64_t i = 0; i < n; ++i) residual[i] = 0.0f + g[i];
      TopKCompressor c(n, ratio);
      std::vector<char> out;
      const int64_t k = c.Compress(g, 0, n, &out);
      ASSERT_EQ(k, c.KFor(n));
      std::vector<uint32_t> order(n);
      std::iota(order.begin(), order.end(), 0u);
      std::stable_sort(order.begin(), order.end(),
                       [&g](uint32_t a, uint32_t b) { return std::fabs(g[a]) > std::fabs(g[b]); });
      std::vector<uint32_t> want(order.begin(), order.begin() + k);
      std::sort(want.begin(), want.end());
      for (int64_t i = 0; i < k; ++i) {
        uint32_t index;
        float value;
        std::memcpy(&index, out.data() + 8 * i, 4);
        std::memcpy(&value, out.data() + 8 * i + 4, 4);
        ASSERT_EQ(index, want[i]) << "n " << n << " ratio " << ratio << " unit " << i;
        EXPECT_EQ(std::memcmp(&value, &residual[index], 4), 0) << "n " << n << " index " << index;
        residual[index] = 0.0f;
      }
      EXPECT_EQ(std::memcmp(c.residual().data(), residual.data(), 4 * n), 0)
          << "n " << n << " ratio " << ratio;
    }
  }
}

// A payload its shard did not take is undone exactly: the range's residual is as before that
// Compress, the other ranges keep theirs, and the next Compress sends what it would have sent.
TEST(TopKCompressor, RestoreUndoesTheLastCompressOfARangeOnly) {
  TopKCompressor c(6, 1.0 / 3);  // one of each range of 3; dyadic values, exact sums
  std::vector<char> out;
  c.Restore(0, 6);  // before any Compress: nothing to undo
  EXPECT_EQ(std::vector<float>(c.residual().begin(), c.residual().end()),
            std::vector<float>(6, 0.0f));
  ASSERT_EQ(c.Compress(std::vector<float>{0.125f, 3, 0.25f, 4, 0.5f, 0.75f}, 0, 3, &out), 1);
  ASSERT_EQ(c.Compress(std::vector<float>{0.125f, 3, 0.25f, 4, 0.5f, 0.75f}, 3, 6, &out), 1);
  const std::vector<float> after_first(c.residual().begin(), c.residual().end());
  EXPECT_EQ(after_first, (std::vector<float>{0.125f, 0, 0.25f, 0, 0.5f, 0.75f}));
  // The second step's first range is refused by its shard; its second range is taken.
  const std::vector<float> g = {2, 0.25f, 1, 0.125f, 3, 0.0625f};
  ASSERT_EQ(c.Compress(g, 0, 3, &out), 1);
  ASSERT_EQ(c.Compress(g, 3, 6, &out), 1);
  c.Restore(0, 3);
  EXPECT_EQ(std::vector<float>(c.residual().begin(), c.residual().end()),
            (std::vector<float>{0.125f, 0, 0.25f, 0.125f, 0, 0.8125f}));
  // Computed again, the step sends from the first range what it sent the first time.
  ASSERT_EQ(c.Compress(g, 0, 3, &out), 1);
  uint32_t index;
  float value;
  std::memcpy(&index, out.data(), 4);
  std::memcpy(&value, out.data() + 4, 4);
  EXPECT_EQ(index, 0u);
  EXPECT_EQ(value, 2.125f);
  EXPECT_EQ(c.residual()[1], 0.25f);
  EXPECT_EQ(c.residual()[2], 1.25f);
}
// The fused decode gives the same update as decoding first and applying float32.
TEST(OptimizerFusedDecode, MatchesDecodeThenApplyForEveryRuleAndEncoding) {
  for (OptimizerKind kind : AllOptimizerKinds()) {
    for (TensorEncoding e : {TensorEncoding::kF32, TensorEncoding::kBf16, TensorEncoding::kF16}) {
      OptimizerOptions o;
      o.kind = kind;
      o.lr = 0.1f;
      o.weight_decay = 0.01f;
      const int n = 37;
      std::vector<float> g(n), w(n);
      for (int i = 0; i < n; ++i) {
        g[i] = std::sin(0.3f * i);
        w[i] = std::cos(0.7f * i);
      }
      std::vector<char> bytes(n * UnitBytes(e));
      EncodeDense(e, g, bytes.data());
      // Cut mid-element twice.
      auto fused = EncodedTensor::FromChunks(e, n, Chunks(bytes, {5, 31}));
      ASSERT_TRUE(fused.ok());
      std::vector<float> decoded(n);
      fused->DecodeInto(absl::MakeSpan(decoded));
      Optimizer a(o, n), b(o, n);
      std::vector<float> wa = w, wb = w;
      for (int step = 0; step < 3; ++step) {
        a.Apply(step, *fused, absl::MakeSpan(wa));
        b.Apply(step, decoded, absl::MakeSpan(wb));
      }
      for (int i = 0; i < n; ++i) EXPECT_EQ(BitsOf(wa[i]), BitsOf(wb[i])) << i;
    }
  }
}

}  // namespace
}  // namespace ps
