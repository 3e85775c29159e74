#include "common/transport/local_frames.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/transport/tensor_wire.h"
#include "grpcpp/support/slice.h"

namespace ps {
namespace {

absl::Status PeerGone(const char* what) {
  return absl::UnavailableError(
      absl::StrCat("local call: ", what, ": ", errno == 0 ? "peer closed" : std::strerror(errno)));
}

// Sends every byte of `parts` (sendmsg, so that a gone peer is EPIPE rather than SIGPIPE).
absl::Status SendAll(int fd, std::vector<iovec> parts) {
  size_t first = 0;
  while (first < parts.size()) {
    msghdr msg{};
    msg.msg_iov = parts.data() + first;
    msg.msg_iovlen = parts.size() - first;
    const ssize_t sent = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      return PeerGone("send");
    }
    size_t left = static_cast<size_t>(sent);
    while (first < parts.size() && left >= parts[first].iov_len) {
      left -= parts[first].iov_len;
      ++first;
    }
    if (left > 0) {
      parts[first].iov_base = static_cast<char*>(parts[first].iov_base) + left;
      parts[first].iov_len -= left;
    }
  }
  return absl::OkStatus();
}

absl::Status ReceiveAll(int fd, void* data, size_t size) {
  char* at = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t got = recv(fd, at, size, 0);
    if (got == 0) {
      errno = 0;
      return PeerGone("receive");
    }
    if (got < 0) {
      if (errno == EINTR) continue;
      return PeerGone("receive");
    }
    at += got;
    size -= static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

}  // namespace

std::string AbstractSocketAddress(const std::string& name) { return std::string(1, '\0') + name; }

absl::Status WriteLocalFrame(int fd, LocalFrameHeader header, const grpc::ByteBuffer& body) {
  std::vector<grpc::Slice> slices;
  if (body.Valid() && !body.Dump(&slices).ok()) {
    return absl::InternalError("local call: cannot read a message's slices");
  }
  std::vector<iovec> parts;
  parts.push_back(iovec{&header, sizeof(header)});
  size_t length = 0;
  for (const grpc::Slice& s : slices) {
    parts.push_back(iovec{const_cast<uint8_t*>(s.begin()), s.size()});
    length += s.size();
  }
  if (length > kMaxLocalFrameBytes) {
    return absl::InvalidArgumentError("local call: message over 1 GiB");
  }
  header.length = static_cast<uint32_t>(length);
  return SendAll(fd, std::move(parts));
}

absl::Status WriteLocalFrame(int fd, LocalFrameHeader header, const std::string& body) {
  header.length = static_cast<uint32_t>(body.size());
  return SendAll(
      fd, {iovec{&header, sizeof(header)}, iovec{const_cast<char*>(body.data()), body.size()}});
}

absl::Status ReadLocalFrame(int fd, LocalFrameHeader* header, grpc::ByteBuffer* body) {
  absl::Status s = ReceiveAll(fd, header, sizeof(*header));
  if (!s.ok()) return s;
  if (header->length > kMaxLocalFrameBytes) {
    return absl::DataLossError(absl::StrCat("local call: a frame of ", header->length, " bytes"));
  }
  // Slices of at most kPayloadSliceBytes come from the warm heap; one slice of a large frame
  // would be fresh pages on every call (glibc maps blocks over 32 MiB), faulted in as they fill.
  std::vector<grpc::Slice> slices = AllocatePayloadSlices(header->length, 1);
  for (grpc::Slice& slice : slices) {
    s = ReceiveAll(fd, MutableSliceData(slice), slice.size());
    if (!s.ok()) return s;
  }
  *body = grpc::ByteBuffer(slices.data(), slices.size());
  return absl::OkStatus();
}

std::string LocalFrameText(const grpc::ByteBuffer& body) {
  std::vector<grpc::Slice> slices;
  std::string text;
  if (body.Valid() && body.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) text.append(s.begin(), s.end());
  }
  return text;
}

}  // namespace ps
