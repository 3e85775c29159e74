#include "server/local_call_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/transport/local_frames.h"
#include "spdlog/spdlog.h"

namespace ps {
namespace {

absl::Status Errno(const char* what) {
  return absl::InternalError(absl::StrCat("local call server: ", what, ": ", std::strerror(errno)));
}

sockaddr_un AddressOf(const std::string& name, socklen_t* length) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = AbstractSocketAddress(name);
  std::memcpy(addr.sun_path, path.data(), path.size());
  *length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
  return addr;
}

absl::Status Reply(int fd, const grpc::Status& status, const grpc::ByteBuffer& response) {
  LocalFrameHeader header;
  header.method_or_code = static_cast<uint32_t>(status.error_code());
  if (!status.ok()) return WriteLocalFrame(fd, header, status.error_message());
  return WriteLocalFrame(fd, header, response);
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalCallServer>> LocalCallServer::Start(
    ParameterServerService& service) {
  std::unique_ptr<LocalCallServer> server(new LocalCallServer(service));
  std::random_device entropy;
  server->name_ = absl::StrCat("ps-shard-", getpid(), "-", entropy(), entropy());
  server->listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (server->listen_fd_ < 0) return Errno("socket");
  socklen_t length = 0;
  const sockaddr_un addr = AddressOf(server->name_, &length);
  if (bind(server->listen_fd_, reinterpret_cast<const sockaddr*>(&addr), length) != 0) {
    return Errno("bind");
  }
  if (listen(server->listen_fd_, 64) != 0) return Errno("listen");
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

LocalCallServer::~LocalCallServer() {
  Shutdown();
  if (listen_fd_ >= 0) close(listen_fd_);
}

int LocalCallServer::held_connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(connections_.size());
}

void LocalCallServer::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    // Wakes accept() and every connection's read or poll; each thread closes its own fd.
    if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);
    for (const Connection& c : connections_) {
      if (!c.done) shutdown(c.fd, SHUT_RDWR);
    }
  }
  if (acceptor_.joinable()) acceptor_.join();
  // No connection is added after the acceptor ended; the list is this thread's alone now.
  for (Connection& c : connections_) c.thread.join();
  connections_.clear();
}

void LocalCallServer::AcceptLoop() {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    std::list<Connection> ended;
    bool back_off = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) {
        if (fd >= 0) close(fd);
        return;
      }
      if (fd < 0 && errno != EINTR && errno != ECONNABORTED) {
        // Out of descriptors or memory: the worker waiting in connect() is answered once some
        // come back (or gives up at its call timeout and calls over gRPC).
        spdlog::warn("local calls: accept failed ({}); trying again", std::strerror(errno));
        back_off = true;
      }
      for (auto it = connections_.begin(); it != connections_.end();) {
        auto next = std::next(it);
        if (it->done) ended.splice(ended.end(), connections_, it);
        it = next;
      }
      if (fd >= 0) {
        Connection& c = connections_.emplace_back();
        c.fd = fd;
        c.thread = std::thread([this, &c] { Serve(&c); });
      }
    }
    for (Connection& c : ended) c.thread.join();
    if (back_off) absl::SleepFor(absl::Milliseconds(100));
  }
}

void LocalCallServer::Serve(Connection* connection) {
  const int fd = connection->fd;
  LocalFrameHeader hello;
  grpc::ByteBuffer token;
  bool ok = ReadLocalFrame(fd, &hello, &token).ok() &&
            hello.method_or_code == static_cast<uint32_t>(LocalMethod::kHello);
  if (ok) {
    const grpc::Status auth = service_.AuthenticateToken(LocalFrameText(token));
    ok = Reply(fd, auth, grpc::ByteBuffer()).ok() && auth.ok();
  }
  while (ok) ok = Answer(fd);
  std::lock_guard<std::mutex> lock(mu_);
  close(fd);
  connection->done = true;
}

bool LocalCallServer::Answer(int fd) {
  LocalFrameHeader header;
  grpc::ByteBuffer request;
  if (!ReadLocalFrame(fd, &header, &request).ok()) return false;
  service_.CountLocalCall();
  const auto method = static_cast<LocalMethod>(header.method_or_code);
  if (method == LocalMethod::kPush) {
    grpc::ByteBuffer response;
    const grpc::Status status = service_.HandlePush(request, &response);
    return Reply(fd, status, response).ok();
  }
  if (method != LocalMethod::kPull && method != LocalMethod::kPushPull) {
    Reply(fd, grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "unknown local method"), {})
        .IgnoreError();
    return false;
  }
  // The pull settles on another thread (a push that completes the round, lease expiry, the
  // deadline, Shutdown): it hands over its outcome and wakes this one through `done_fd`.
  const int done_fd = eventfd(0, EFD_CLOEXEC);
  if (done_fd < 0) return false;
  std::mutex outcome_mu;
  grpc::Status status;
  grpc::ByteBuffer response;
  const absl::Time deadline =
      absl::Now() +
      (header.timeout_ms == 0 ? absl::InfiniteDuration() : absl::Milliseconds(header.timeout_ms));
  const int64_t id = service_.StartPull(request, method == LocalMethod::kPushPull, deadline,
                                        [&](grpc::Status s, grpc::ByteBuffer r) {
                                          {
                                            std::lock_guard<std::mutex> lock(outcome_mu);
                                            status = std::move(s);
                                            response = std::move(r);
                                          }
                                          const uint64_t one = 1;
                                          if (write(done_fd, &one, sizeof(one)) != sizeof(one))
                                            std::abort();
                                        });
  const bool client_stayed = AwaitPull(fd, id, done_fd);
  close(done_fd);
  if (!client_stayed) return false;
  // The outcome was handed over before `done_fd` fired; the lock only orders that hand-over.
  grpc::Status outcome_status;
  grpc::ByteBuffer outcome_response;
  {
    std::lock_guard<std::mutex> lock(outcome_mu);
    outcome_status = std::move(status);
    outcome_response = std::move(response);
  }
  return Reply(fd, outcome_status, outcome_response).ok();
}

bool LocalCallServer::AwaitPull(int fd, int64_t id, int done_fd) {
  pollfd watched[2] = {{done_fd, POLLIN, 0}, {fd, POLLIN | POLLRDHUP, 0}};
  for (;;) {
    if (poll(watched, 2, -1) < 0 && errno != EINTR) std::abort();
    if (watched[0].revents != 0) break;
    if (watched[1].revents != 0) {
      // The client hung up or broke the protocol (nothing may come while its call waits), or
      // Shutdown() closed the connection: the waiting pull is cancelled, as gRPC's OnCancel does.
      if (id != 0) service_.CancelPull(id);
      uint64_t count;
      while (read(done_fd, &count, sizeof(count)) < 0 && errno == EINTR) {
      }
      return false;
    }
  }
  uint64_t count;
  while (read(done_fd, &count, sizeof(count)) < 0 && errno == EINTR) {
  }
  return true;
}

}  // namespace ps
