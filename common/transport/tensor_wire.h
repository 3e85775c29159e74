#ifndef PS_COMMON_TRANSPORT_TENSOR_WIRE_H_
#define PS_COMMON_TRANSPORT_TENSOR_WIRE_H_

// ps.v1 messages with one large `bytes` payload (PushRequest.gradient, PullResponse.values), sent
// and received as gRPC slices without copying the payload. The bytes on the wire are exactly the
// protobuf encoding of the message (protobuf accepts fields in any order), so typed stubs and
// other clients interoperate; only the way they are produced and read differs:
// - sending: the header (the message without its payload field) is serialised normally, then the
//   payload field's key and length, then the payload slices, which may borrow the caller's memory;
// - receiving: the slices gRPC delivered are walked in place; the payload is returned as views of
//   them (see EncodedTensor::FromChunks) and only the small header is copied and parsed.

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace ps {

// Slices of at most this many bytes carry payloads the process builds itself (pull replies):
// well below glibc's 32 MiB mmap ceiling (see process_tuning.h), so a reply's buffers come from
// the warm heap instead of fresh pages. ps_bench_transport measured 256 KiB no faster on 64 MiB
// pulls; fewer, larger slices mean fewer allocations.
inline constexpr size_t kPayloadSliceBytes = size_t{4} << 20;

// Counts the slices that borrow a caller's memory, so the caller can wait until gRPC has let go
// of all of them before it reuses or frees that memory.
class BorrowedPayload {
 public:
  BorrowedPayload() = default;
  BorrowedPayload(const BorrowedPayload&) = delete;
  BorrowedPayload& operator=(const BorrowedPayload&) = delete;
  ~BorrowedPayload() { WaitUntilReleased(); }

  // A slice over [data, data + size) without a copy; counted until gRPC releases it.
  grpc::Slice Borrow(const void* data, size_t size);
  // Blocks until every borrowed slice has been released.
  void WaitUntilReleased();

 private:
  static void Release(void* self);
  absl::Mutex mu_;
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
};

// A slice over [data, data + size) without a copy that keeps `owner` (which must keep those bytes
// alive and unchanged) until gRPC releases the slice.
grpc::Slice LendSlice(const void* data, size_t size, std::shared_ptr<const void> owner);

// Fresh slices for `bytes` bytes, each at most kPayloadSliceBytes and a multiple of `unit`.
std::vector<grpc::Slice> AllocatePayloadSlices(size_t bytes, size_t unit);
// The writable bytes of a slice this process allocated.
inline char* MutableSliceData(grpc::Slice& slice) {
  return reinterpret_cast<char*>(const_cast<uint8_t*>(slice.begin()));
}

// The message: `header` (whose payload field must be empty), then field `payload_field` holding
// the concatenation of `payload`.
grpc::ByteBuffer JoinPayloadMessage(const google::protobuf::MessageLite& header, int payload_field,
                                    std::vector<grpc::Slice> payload);

// A received message split in place: `payload` views the bytes of field `payload_field` inside
// `slices`, which hold references to gRPC's buffers (keep this object alive while using them).
struct SplitMessage {
  std::vector<grpc::Slice> slices;
  std::vector<absl::Span<const char>> payload;
};
// Parses `buffer` into `header` (all fields but the payload) and `out`. INVALID_ARGUMENT for a
// malformed message. When the payload field occurs more than once the last one counts, as in
// protobuf.
absl::Status SplitPayloadMessage(const grpc::ByteBuffer& buffer, int payload_field,
                                 google::protobuf::MessageLite* header, SplitMessage* out);

// A small message as a ByteBuffer, and back (for the replies of the raw methods).
grpc::ByteBuffer SerializeToByteBuffer(const google::protobuf::MessageLite& message);
absl::Status ParseFromByteBuffer(const grpc::ByteBuffer& buffer,
                                 google::protobuf::MessageLite* message);

}  // namespace ps

#endif  // PS_COMMON_TRANSPORT_TENSOR_WIRE_H_
