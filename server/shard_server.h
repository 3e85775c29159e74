#ifndef PS_SERVER_SHARD_SERVER_H_
#define PS_SERVER_SHARD_SERVER_H_

// A running ps_server: a Shard behind its gRPC service and the standard grpc.health.v1 service
// on one listening port, with its checkpoint writer. Used by the ps_server binary, by in-process
// tests and by benchmarks.
//
// Health: the overall service ("") is SERVING once the server listens, after any restore; the
// service "ps.v1.ParameterServer" is SERVING only once the shard holds parameters (initialised
// by a worker's Init, or restored from a checkpoint). Both turn NOT_SERVING when shutdown begins.
//
// Checkpoints (when checkpoint_dir is set): at start the newest intact checkpoint is restored;
// then one is written every checkpoint_every_updates updates (BSP: at that exact version on every
// shard, one consistent cut) and, outside BSP, every checkpoint_interval if the version moved; a
// final one is written at Shutdown() after the shard stopped accepting updates, so no update
// acknowledged before it is lost. With sparse tables most of them are incremental (the rows
// changed since the last full one; ShardOptions::full_snapshot_every); a restore takes the newest
// that is intact and whose full base is too.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/storage/checkpoint.h"
#include "common/transport/grpc_security.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/server.h"
#include "server/local_call_server.h"
#include "server/service.h"
#include "server/shard.h"

namespace ps {

inline constexpr char kParameterServiceName[] = "ps.v1.ParameterServer";

struct ShardServerOptions {
  ShardOptions shard;                               // its incarnation is drawn by Start()
  std::string host = "127.0.0.1";                   // address to bind; 0.0.0.0 for every interface
  int port = 0;                                     // 0 picks a free port (see port())
  int max_message_bytes = 256 << 20;                // receive and send limit of one message
  absl::Duration max_pull_wait = absl::Minutes(5);  // cap on a pull without a client deadline
  // If set, every gradient applied on its own is appended to this file as a line
  // "version_before rank clock base_version staleness", in apply order (for ps_replay).
  std::string record_updates_path;
  SecurityOptions security;
  std::string checkpoint_dir;  // empty: no checkpoints
  int checkpoint_keep = 3;
  int64_t checkpoint_every_updates = 0;                       // 0: not by count
  absl::Duration checkpoint_interval = absl::ZeroDuration();  // 0: not by time (ignored in BSP)
  // -1: restore the newest checkpoint the shard can take. Otherwise exactly this version, which
  // must be there intact (Start() fails otherwise), and the newer ones are removed: a rollback of
  // every shard to one BSP cut (ps_launch --rollback_shards).
  int64_t restore_version = -1;
  int drop_push_reply_every = 0;  // fault injection, see ServiceOptions
  // A second, plaintext port (-1: none; 0: a free one) serving only grpc.health.v1, with the same
  // statuses: for probes that cannot speak TLS (Kubernetes' gRPC probes, container health
  // checks) when the main port requires it.
  int health_port = -1;
  // Workers on this host may move payloads through shared memory (ServiceOptions), and with
  // local_calls send their calls over a Unix socket instead of gRPC (local_call_server.h).
  bool accept_shared_memory = true;
  bool local_calls = true;
};

class ShardServer {
 public:
  // Restores, binds and starts serving. UNAVAILABLE when the port cannot be bound;
  // INVALID_ARGUMENT / NOT_FOUND for bad security files; FAILED_PRECONDITION when the newest
  // intact checkpoint belongs to another configuration; NOT_FOUND or DATA_LOSS when
  // restore_version is not there intact.
  static absl::StatusOr<std::unique_ptr<ShardServer>> Start(const ShardServerOptions& options);
  ~ShardServer();  // Shutdown()s

  int port() const { return port_; }
  int health_port() const { return health_port_; }
  Shard& shard() { return *shard_; }
  ParameterServerService& service() { return *service_; }
  // The checkpoint restored at start, if any.
  const std::optional<CheckpointInfo>& restored() const { return restored_; }
  // Checkpoints never written because a newer one was queued before the disk took them
  // (DropSupersededSnapshots): the writer falls behind --checkpoint_every.
  int64_t checkpoints_superseded() const { return checkpoints_superseded_.load(); }

  // Ordered stop: health NOT_SERVING; the shard refuses further updates and fails waiting pulls
  // (UNAVAILABLE, so clients retry against the restarted shard); the final checkpoint; then
  // in-flight calls finish within `grace`. Idempotent; thread-safe. The status is the final
  // checkpoint's (OK without checkpoints).
  absl::Status Shutdown(absl::Duration grace = absl::Seconds(2));
  // Blocks until Shutdown() has completed.
  void Wait();

 private:
  ShardServer() = default;
  void WriterLoop();
  // Writes the snapshot (an incremental one keeps its base from the pruning).
  absl::Status WriteCheckpoint(const Shard::Snapshot& snapshot);
  void SetParametersServing(bool serving);

  ShardServerOptions options_;
  std::FILE* record_ = nullptr;  // closed after the shard stops
  std::unique_ptr<Shard> shard_;
  std::unique_ptr<ParameterServerService> service_;
  std::unique_ptr<LocalCallServer> local_calls_;  // after service_: goes first
  // Bounds what the connections may buffer; sized to the slice once the shard has one.
  grpc::ResourceQuota receive_quota_{"ps-shard-receive"};
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Server> health_server_;  // plaintext, health only
  // The health port's server needs one synchronous service for gRPC to run its built-in health
  // service synchronously; this one answers UNIMPLEMENTED to every parameter-server method.
  std::unique_ptr<ps::v1::ParameterServer::Service> unimplemented_;
  int port_ = 0;
  int health_port_ = -1;
  std::optional<CheckpointDir> checkpoints_;
  std::optional<CheckpointInfo> restored_;

  // Snapshots waiting for the writer thread, and its stop flag.
  std::mutex writer_mu_;
  std::condition_variable writer_cv_;
  std::deque<Shard::Snapshot> queue_;
  bool writer_stop_ = false;
  int64_t last_written_version_ = -1;  // guarded by writer_mu_
  std::atomic<int64_t> checkpoints_superseded_{0};
  std::thread writer_;

  std::mutex shutdown_mu_;
  bool shut_down_ = false;  // guarded by shutdown_mu_
  absl::Status shutdown_status_;
  std::mutex health_mu_;  // orders health updates against shutdown
  bool health_final_ = false;
};

}  // namespace ps

#endif  // PS_SERVER_SHARD_SERVER_H_
