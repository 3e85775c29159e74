#ifndef PS_COMMON_TRANSPORT_LOCAL_FRAMES_H_
#define PS_COMMON_TRANSPORT_LOCAL_FRAMES_H_

// The local call path: a worker and a shard on one host (the worker's payloads already in their
// shared region) exchange Push, Pull and PushPull over a Unix stream socket instead of gRPC's
// HTTP/2, saving its framing and thread hand-offs on every step. The messages are the same
// ps.v1 bytes gRPC would carry, with the same handlers behind them; only the envelope differs:
//
//   request  {uint32 method, uint32 timeout_ms, uint32 length} + length bytes of the message
//   reply    {uint32 code,   uint32 0,          uint32 length} + the response, or the error text
//
// (host byte order: both ends are on one host). The first request of a connection is kHello,
// whose message is the cluster token ("" without one); a connection answered anything but OK is
// closed. One call at a time per connection.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/support/byte_buffer.h"

namespace ps {

enum class LocalMethod : uint32_t { kHello = 0, kPush = 1, kPull = 2, kPushPull = 3 };

struct LocalFrameHeader {
  uint32_t method_or_code = 0;
  uint32_t timeout_ms = 0;
  uint32_t length = 0;
};

// A frame bigger than this is refused (a corrupt length, not a message: payloads of that size
// travel in the shared region).
inline constexpr uint32_t kMaxLocalFrameBytes = 1u << 30;

// The abstract-namespace address ("\0" + name) of a listening socket named `name`.
std::string AbstractSocketAddress(const std::string& name);

// Writes the header and `body` (all of it; EINTR retried; no SIGPIPE). UNAVAILABLE when the
// peer is gone.
absl::Status WriteLocalFrame(int fd, LocalFrameHeader header, const grpc::ByteBuffer& body);
absl::Status WriteLocalFrame(int fd, LocalFrameHeader header, const std::string& body);
// Reads one frame; its body into `body` as one slice. UNAVAILABLE when the peer closed or the
// read failed, DATA_LOSS for a length over kMaxLocalFrameBytes.
absl::Status ReadLocalFrame(int fd, LocalFrameHeader* header, grpc::ByteBuffer* body);
// A frame's body as text (a token, an error message).
std::string LocalFrameText(const grpc::ByteBuffer& body);

}  // namespace ps

#endif  // PS_COMMON_TRANSPORT_LOCAL_FRAMES_H_
