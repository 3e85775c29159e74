#include "worker/local_channel.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/transport/local_frames.h"

namespace ps {

absl::StatusOr<std::shared_ptr<LocalChannel>> LocalChannel::Connect(const std::string& name,
                                                                    const std::string& token,
                                                                    absl::Duration timeout) {
  const std::string address = AbstractSocketAddress(name);
  sockaddr_un addr{};
  if (name.empty() || address.size() > sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("local socket name '", name, "'"));
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  std::shared_ptr<LocalChannel> channel(new LocalChannel(fd));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, address.data(), address.size());
  const socklen_t length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.size());
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), length) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach local socket ", name, ": ", std::strerror(errno)));
  }
  // The handshake alone is bounded here; the calls bound their own waits (poll).
  const timeval tv = absl::ToTimeval(timeout);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  LocalFrameHeader hello;
  hello.method_or_code = static_cast<uint32_t>(LocalMethod::kHello);
  absl::Status s = WriteLocalFrame(fd, hello, token);
  LocalFrameHeader answer;
  grpc::ByteBuffer text;
  if (s.ok()) s = ReadLocalFrame(fd, &answer, &text);
  if (!s.ok()) return s;
  if (answer.method_or_code != 0) {
    return absl::Status(static_cast<absl::StatusCode>(answer.method_or_code),
                        absl::StrCat("local socket ", name, ": ", LocalFrameText(text)));
  }
  const timeval none{};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
  return channel;
}

LocalChannel::~LocalChannel() { close(fd_); }

void LocalChannel::Interrupt() {
  interrupted_.store(true);
  shutdown(fd_, SHUT_RDWR);
}

}  // namespace ps
