#ifndef PS_SERVER_SHARD_SERVER_H_
#define PS_SERVER_SHARD_SERVER_H_

// A running ps_server: a Shard behind its gRPC service on one listening port. Used by the
// ps_server binary, by in-process tests and by benchmarks.

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "server/service.h"
#include "server/shard.h"

namespace ps {

struct ShardServerOptions {
  ShardOptions shard;
  std::string host = "127.0.0.1";                   // address to bind; 0.0.0.0 for every interface
  int port = 0;                                     // 0 picks a free port (see port())
  int max_message_bytes = 256 << 20;                // receive and send limit of one message
  absl::Duration max_pull_wait = absl::Minutes(5);  // cap on a pull without a client deadline
  // If set, every gradient applied on its own is appended to this file as a line
  // "version_before rank clock base_version staleness", in apply order (for ps_replay).
  std::string record_updates_path;
};

class ShardServer {
 public:
  // Binds and starts serving. UNAVAILABLE when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<ShardServer>> Start(const ShardServerOptions& options);
  ~ShardServer();  // Shutdown()s

  int port() const { return port_; }
  Shard& shard() { return *shard_; }

  // Ordered stop: fail the waiting pulls (UNAVAILABLE) so no handler is stuck, then stop
  // accepting calls and let in-flight ones finish within `grace`. Idempotent; thread-safe.
  void Shutdown(absl::Duration grace = absl::Seconds(2));
  // Blocks until Shutdown() has completed.
  void Wait();

 private:
  ShardServer() = default;
  std::FILE* record_ = nullptr;  // closed after the shard stops
  std::unique_ptr<Shard> shard_;
  std::unique_ptr<ParameterServerService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_SHARD_SERVER_H_
