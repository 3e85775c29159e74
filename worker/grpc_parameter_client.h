#ifndef PS_WORKER_GRPC_PARAMETER_CLIENT_H_
#define PS_WORKER_GRPC_PARAMETER_CLIENT_H_

// ParameterClient over gRPC: one channel per shard; every operation issues its S calls at once
// on a completion queue and waits for all of them. Push and Pull are raw calls: a float32
// gradient is sent straight from the caller's buffer (gRPC borrows it; Push returns only once gRPC
// has released it) and pulled values are decoded straight from gRPC's receive buffers into the
// caller's (common/tensor_wire.h). Every call has a deadline. UNAVAILABLE answers
// (a shard restarting, a lost reply), and CANCELLED ones this client did not cause (a server
// shutting down cancels the calls it has not started), are retried with exponential backoff for up
// to `retry_for`, which is safe because every rpc is idempotent: pushes are deduplicated by
// (worker, clock) on the shard. Calls carry this process's incarnation and the incarnation of the
// shard process it registered with, so a shard that restarted answers ABORTED and the trainer
// registers again.

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/grpc_security.h"
#include "common/tensor_codec.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/parameter_server.grpc.pb.h"
#include "worker/parameter_client.h"

namespace ps {

struct GrpcClientOptions {
  std::vector<std::string> servers;                 // host:port of shard 0, 1, ... in order
  uint64_t fingerprint = 0;                         // of the model's ParamLayout
  int64_t total_params = 0;                         // N of the layout
  int rank = 0;                                     // this worker; ignored by observers
  absl::Duration call_timeout = absl::Seconds(30);  // Register, Init, Push, GetStatus
  absl::Duration pull_timeout = absl::Minutes(10);  // a pull may wait for slow workers
  absl::Duration retry_for = absl::Seconds(60);     // keep retrying UNAVAILABLE this long
  absl::Duration initial_backoff = absl::Milliseconds(100);
  int max_message_bytes = 256 << 20;
  ClientSecurity security;   // TLS credentials and token; default: plaintext, no token
  uint64_t incarnation = 0;  // this worker process; 0 draws a random one
  // Fault injection for tests: send every push twice; the second must come back as duplicates
  // from every shard (INTERNAL otherwise: exactly-once is broken).
  bool duplicate_pushes = false;
  // Compression, per run: how gradients are pushed (f32, bf16, fp16, or top-k with error
  // feedback keeping `topk_ratio` of each shard's elements per step) and how weights are pulled
  // (f32, bf16 or fp16).
  TensorEncoding push_encoding = TensorEncoding::kF32;
  double topk_ratio = 0.01;
  TensorEncoding pull_encoding = TensorEncoding::kF32;
};

class GrpcParameterClient final : public ParameterClient {
 public:
  // INVALID_ARGUMENT for an empty server list.
  static absl::StatusOr<std::unique_ptr<GrpcParameterClient>> Create(
      const GrpcClientOptions& options);

  absl::StatusOr<ClusterInfo> Register(int rank, absl::Duration timeout) override;
  absl::Status Heartbeat() override;
  absl::Status Init(absl::Span<const float> params) override;
  absl::StatusOr<PullStats> Pull(int64_t clock, bool no_wait, absl::Span<float> params) override;
  absl::StatusOr<PushStats> Push(int64_t clock, const std::vector<int64_t>& base_versions,
                                 int num_samples, absl::Span<const float> gradient) override;
  absl::StatusOr<std::vector<ShardReport>> Status() override;
  void Cancel() override;
  uint64_t incarnation() const { return options_.incarnation; }

 private:
  using Stub = ps::v1::ParameterServer::Stub;
  template <typename Request, typename Response>
  using StartFn = std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> (Stub::*)(
      grpc::ClientContext*, const Request&, grpc::CompletionQueue*);
  // A raw (ByteBuffer) call of `method`, e.g. "/ps.v1.ParameterServer/Push".
  struct RawMethod {
    const char* path;
  };

  explicit GrpcParameterClient(const GrpcClientOptions& options);
  KeyRange range(int shard) const;
  // One request per shard with the layout fingerprint and the shard's key range filled in.
  template <typename Request>
  std::vector<Request> RequestsPerShard() const;
  // One call per shard, all in flight together; retries UNAVAILABLE. The error returned names
  // the method and the shard.
  template <typename Request, typename Response>
  absl::Status CallAll(const char* method, StartFn<Request, Response> start,
                       const std::vector<Request>& requests, std::vector<Response>* responses,
                       absl::Duration timeout, bool wait_for_ready);
  absl::Status CallAll(const char* method, RawMethod raw,
                       const std::vector<grpc::ByteBuffer>& requests,
                       std::vector<grpc::ByteBuffer>* responses, absl::Duration timeout,
                       bool wait_for_ready);
  // The loop behind both: `start(shard, ctx, cq)` starts shard's call and returns its reader.
  template <typename Response, typename Start>
  absl::Status CallEach(const char* method, Start start, std::vector<Response>* responses,
                        absl::Duration timeout, bool wait_for_ready);

  GrpcClientOptions options_;
  std::vector<std::unique_ptr<Stub>> stubs_;
  std::vector<std::unique_ptr<grpc::GenericStub>> raw_stubs_;  // the same channels
  std::vector<std::vector<char>> encoded_;                     // compressed gradients, per shard
  std::unique_ptr<TopKCompressor> topk_;                       // error feedback state
  // Per-shard call settings: deadline, wait-for-ready and the token.
  void Prepare(grpc::ClientContext* ctx, absl::Duration timeout, bool wait_for_ready) const;
  std::vector<uint64_t> shard_incarnations() const;

  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // The shards' incarnations from the last Register (0 until then).
  std::vector<uint64_t> shard_incarnations_ ABSL_GUARDED_BY(mu_);
  std::vector<grpc::ClientContext*> active_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_WORKER_GRPC_PARAMETER_CLIENT_H_
