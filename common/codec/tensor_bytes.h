#ifndef PS_COMMON_CODEC_TENSOR_BYTES_H_
#define PS_COMMON_CODEC_TENSOR_BYTES_H_

// Init payloads travel as raw little-endian float32 bytes (see parameter_server.proto). This view
// reinterprets a byte string in place, without a copy.

#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace ps {

static_assert(sizeof(float) == 4, "the wire format is float32");

// A read-only float view of `bytes`; INVALID_ARGUMENT when its length is not a multiple of 4.
inline absl::StatusOr<absl::Span<const float>> FloatView(const std::string& bytes,
                                                         const char* field) {
  if (bytes.size() % sizeof(float) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " has ", bytes.size(), " bytes, not a whole number of float32"));
  }
  return absl::MakeConstSpan(reinterpret_cast<const float*>(bytes.data()),
                             bytes.size() / sizeof(float));
}

}  // namespace ps

#endif  // PS_COMMON_CODEC_TENSOR_BYTES_H_
