#ifndef PS_SERVER_LOCAL_CALL_SERVER_H_
#define PS_SERVER_LOCAL_CALL_SERVER_H_

// The shard's end of the local call path (common/transport/local_frames.h): a Unix socket in the
// abstract namespace, named to the workers that attached a shared region (AttachSharedMemory's
// answer), so only processes on this host and in this network namespace can reach it. Each
// connection gets a thread that answers its calls one at a time through the gRPC service's own
// handlers, after the connection's first call proved it holds the cluster token. A pull that waits
// holds its connection's thread; a client that goes away cancels it, as a cancelled rpc would.

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "server/service.h"

namespace ps {

class LocalCallServer {
 public:
  // Listens on a fresh abstract name. `service` must outlive the server; its token is the one a
  // connection must present (without one, any connection of this host and namespace is served,
  // as the gRPC port serves any caller).
  static absl::StatusOr<std::unique_ptr<LocalCallServer>> Start(ParameterServerService& service);
  ~LocalCallServer();  // Shutdown()s
  LocalCallServer(const LocalCallServer&) = delete;
  LocalCallServer& operator=(const LocalCallServer&) = delete;

  // The name workers connect to (without the abstract namespace's leading NUL).
  const std::string& name() const { return name_; }
  // The connections whose threads this server holds: open ones, and ended ones not yet joined.
  int held_connections() const;
  // Stops accepting, ends every connection (their waiting pulls are cancelled) and joins the
  // threads. Idempotent.
  void Shutdown();

 private:
  explicit LocalCallServer(ParameterServerService& service) : service_(service) {}
  // One worker's connection; `done` once its thread no longer uses `fd` (then closed).
  struct Connection {
    int fd = -1;
    bool done = false;
    std::thread thread;
  };
  void AcceptLoop();
  void Serve(Connection* connection);
  // One call on `fd`; false when the connection is over.
  bool Answer(int fd);
  // Waits for a pull started on the service while watching `fd` for its client going away.
  bool AwaitPull(int fd, int64_t id, int done_fd);

  ParameterServerService& service_;
  std::string name_;
  int listen_fd_ = -1;
  std::thread acceptor_;
  mutable std::mutex mu_;
  bool stopping_ = false;  // guarded by mu_
  // Guarded by mu_; a list for stable addresses. The threads of ended connections are joined and
  // dropped at the next accept, so a long-lived shard does not keep one per worker it ever had.
  std::list<Connection> connections_;
};

}  // namespace ps

#endif  // PS_SERVER_LOCAL_CALL_SERVER_H_
