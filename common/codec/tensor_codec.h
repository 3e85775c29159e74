#ifndef PS_COMMON_CODEC_TENSOR_CODEC_H_
#define PS_COMMON_CODEC_TENSOR_CODEC_H_

// How a tensor slice travels: its encoding on the wire (float32, bfloat16, float16, or top-k
// sparse pairs) and a view of its bytes exactly as the transport delivered them, in pieces of any
// alignment. Readers decode straight out of those pieces (the optimizer fuses the decode into its
// update loop), so a received payload is never gathered into an intermediate buffer first.
//
// Byte layouts (little-endian), for a slice of n elements:
//   kF32:  n float32.
//   kBf16: n bfloat16 (the high half of a float32), rounded to nearest even.
//   kF16:  n IEEE 754 binary16, rounded to nearest even (values beyond its range become +-Inf).
//   kTopK: k pairs {uint32 index, float32 value}, indices strictly increasing and < n; the
//          elements not named are zero. Gradients only.

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ps {

enum class TensorEncoding : int { kF32 = 0, kBf16 = 1, kF16 = 2, kTopK = 3 };

// "f32", "bf16", "fp16" (or "f16"), "topk"; INVALID_ARGUMENT otherwise.
absl::StatusOr<TensorEncoding> ParseTensorEncoding(const std::string& name);
std::string TensorEncodingName(TensorEncoding encoding);
// INVALID_ARGUMENT unless `value` is one of the enum's values (it comes from the wire).
absl::StatusOr<TensorEncoding> TensorEncodingFromWire(int64_t value);
inline bool IsDenseEncoding(TensorEncoding encoding) { return encoding != TensorEncoding::kTopK; }
// Bytes of one unit: an element (dense encodings) or one {index, value} pair (kTopK).
int UnitBytes(TensorEncoding encoding);

// Scalar conversions, exact round to nearest even; NaN stays NaN.
uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t h);
uint16_t FloatToF16(float f);
float F16ToFloat(uint16_t h);

// `count` whole units of an encoding at `data` (any alignment); the first is unit `first` of the
// payload.
struct PayloadPiece {
  const char* data = nullptr;
  int64_t first = 0;
  int64_t count = 0;
};

// An encoded tensor whose bytes lie in the transport's buffers. Those buffers must outlive the
// view; a unit that straddles two buffers is copied into the view's own small storage (at most one
// per buffer boundary), so every piece holds whole units.
class EncodedTensor {
 public:
  EncodedTensor() = default;
  // One contiguous payload (a local buffer or a single received slice).
  EncodedTensor(TensorEncoding encoding, int64_t size, absl::Span<const char> bytes);
  // A dense float32 tensor over `values`, no copy.
  static EncodedTensor OfFloats(absl::Span<const float> values);
  // A payload delivered in `chunks`, in order. INVALID_ARGUMENT when the total length is not a
  // whole number of units.
  static absl::StatusOr<EncodedTensor> FromChunks(TensorEncoding encoding, int64_t size,
                                                  absl::Span<const absl::Span<const char>> chunks);

  // Moving keeps the pieces valid: std::vector's move keeps its heap buffer.
  EncodedTensor(EncodedTensor&&) = default;
  EncodedTensor& operator=(EncodedTensor&&) = default;
  EncodedTensor(const EncodedTensor&) = delete;
  EncodedTensor& operator=(const EncodedTensor&) = delete;

  TensorEncoding encoding() const { return encoding_; }
  int64_t size() const { return size_; }    // elements of the dense tensor
  int64_t units() const { return units_; }  // units in the payload
  int64_t payload_bytes() const { return units_ * UnitBytes(encoding_); }
  const std::vector<PayloadPiece>& pieces() const { return pieces_; }
  bool dense() const { return encoding_ != TensorEncoding::kTopK; }

  // INVALID_ARGUMENT naming `what` unless the payload fits the encoding and the size: a dense
  // payload has size() units; top-k indices are strictly increasing and below size().
  absl::Status CheckShape(const char* what) const;
  // Whether every value is finite (no NaN or Inf).
  bool AllFinite() const;
  // Writes the dense tensor into `out` (size() floats); top-k zero-fills first.
  void DecodeInto(absl::Span<float> out) const;

 private:
  TensorEncoding encoding_ = TensorEncoding::kF32;
  int64_t size_ = 0;
  int64_t units_ = 0;
  std::vector<PayloadPiece> pieces_;
  std::vector<char> straddle_;  // units that straddled two chunks; never reallocated once built
};

// Loads element j of a dense piece whatever its alignment.
template <TensorEncoding E>
inline float LoadElement(const char* data, int64_t j) {
  if constexpr (E == TensorEncoding::kF32) {
    float f;
    std::memcpy(&f, data + 4 * j, 4);
    return f;
  } else {
    uint16_t h;
    std::memcpy(&h, data + 2 * j, 2);
    if constexpr (E == TensorEncoding::kBf16) {
      return Bf16ToFloat(h);
    } else {
      return F16ToFloat(h);
    }
  }
}

// Calls f(std::integral_constant<TensorEncoding, E>{}) for a dense encoding E, so a loop can be
// instantiated per encoding with LoadElement<E> inlined. kTopK must be decoded first.
template <typename F>
inline void DispatchDense(TensorEncoding encoding, F&& f) {
  switch (encoding) {
    case TensorEncoding::kF32:
      f(std::integral_constant<TensorEncoding, TensorEncoding::kF32>{});
      return;
    case TensorEncoding::kBf16:
      f(std::integral_constant<TensorEncoding, TensorEncoding::kBf16>{});
      return;
    case TensorEncoding::kF16:
      f(std::integral_constant<TensorEncoding, TensorEncoding::kF16>{});
      return;
    case TensorEncoding::kTopK:
      break;
  }
}

// Encodes `values` densely into `out` (values.size() * UnitBytes bytes). kTopK is not dense.
void EncodeDense(TensorEncoding encoding, absl::Span<const float> values, char* out);

// Top-k sparsification with error feedback (Stich et al. 2018; Lin et al., "Deep Gradient
// Compression", 2018): what is not sent this step is kept and added to the next step's gradient,
// so no part of the gradient is lost, only delayed.
class TopKCompressor {
 public:
  // `ratio` of the elements (at least one) is sent per step; 0 < ratio <= 1.
  TopKCompressor(int64_t size, double ratio);
  // Adds `gradient` to the residual and moves the k largest-magnitude residual elements of
  // [begin, end) into `out` as kTopK units, in index order relative to begin; returns k. Of
  // equal magnitudes at the cut, the lowest indices go. `out` is resized to k * 8 bytes.
  int64_t Compress(absl::Span<const float> gradient, int64_t begin, int64_t end,
                   std::vector<char>* out);
  // Puts [begin, end) of the residual back as it was before the last Compress of that range, as
  // if that Compress had not run: for a payload its shard did not take (the push failed, or the
  // shard had that step already), whose values would otherwise be lost and whose gradient the
  // caller computes again or has delivered before. Exact (a copy, not a subtraction). Only the
  // last Compress of a range can be undone, once.
  void Restore(int64_t begin, int64_t end);
  // Elements sent per step for a range of `n` elements.
  int64_t KFor(int64_t n) const;
  absl::Span<const float> residual() const { return residual_; }

 private:
  double ratio_;
  std::vector<float> residual_;
  std::vector<float> before_;         // the residual before each range's last Compress
  std::vector<uint32_t> counts_;      // scratch for the selection: a count per digit value
  std::vector<uint32_t> candidates_;  // ... and the magnitudes that share the cut's top digit
};

}  // namespace ps

#endif  // PS_COMMON_CODEC_TENSOR_CODEC_H_
