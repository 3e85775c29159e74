#ifndef PS_SERVER_SERVICE_H_
#define PS_SERVER_SERVICE_H_

// The gRPC adapter of a Shard: converts ps.v1 messages to the Shard's domain calls and statuses
// back. It holds no state of its own besides the Shard it serves.

#include "absl/time/time.h"
#include "proto/parameter_server.grpc.pb.h"
#include "server/shard.h"

namespace ps {

class ParameterServerService final : public ps::v1::ParameterServer::Service {
 public:
  // `shard` must outlive the service. A pull whose client set no deadline waits at most
  // `max_pull_wait`.
  ParameterServerService(Shard& shard, absl::Duration max_pull_wait)
      : shard_(shard), max_pull_wait_(max_pull_wait) {}

  grpc::Status Register(grpc::ServerContext* ctx, const ps::v1::RegisterRequest* req,
                        ps::v1::RegisterResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const ps::v1::HeartbeatRequest* req,
                         ps::v1::HeartbeatResponse* resp) override;
  grpc::Status Init(grpc::ServerContext* ctx, const ps::v1::InitRequest* req,
                    ps::v1::InitResponse* resp) override;
  grpc::Status Pull(grpc::ServerContext* ctx, const ps::v1::PullRequest* req,
                    ps::v1::PullResponse* resp) override;
  grpc::Status Push(grpc::ServerContext* ctx, const ps::v1::PushRequest* req,
                    ps::v1::PushResponse* resp) override;
  grpc::Status GetStatus(grpc::ServerContext* ctx, const ps::v1::GetStatusRequest* req,
                         ps::v1::GetStatusResponse* resp) override;

 private:
  Shard& shard_;
  absl::Duration max_pull_wait_;
};

}  // namespace ps

#endif  // PS_SERVER_SERVICE_H_
