#ifndef PS_SERVER_SERVICE_H_
#define PS_SERVER_SERVICE_H_

// The gRPC adapter of a Shard: checks the cluster token, converts ps.v1 messages to the Shard's
// domain calls and statuses back. Its only state besides the Shard is counters.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/shm/shared_memory.h"
#include "common/shm/shared_region_layout.h"
#include "proto/parameter_server.grpc.pb.h"
#include "server/shard.h"
#include "server/worker_regions.h"

namespace ps {

// A worker's shared region holds at most this many slots (pairs of gradient and weights areas).
inline constexpr int kMaxSharedSlots = SharedRegionLayout::kMaxSlots;

struct ParsedPull;
struct PullSink;
struct SplitMessage;

struct ServiceOptions {
  absl::Duration max_pull_wait = absl::Minutes(5);  // a pull without a client deadline
  // The cluster token. When set, every call must carry the metadata "authorization: Bearer
  // <token>"; any other call is answered UNAUTHENTICATED before its handler looks at the
  // request or the shard.
  std::string token;
  // Fault injection for tests: the reply of every Nth push (0: none) is replaced by UNAVAILABLE
  // after the shard accepted the push, as if the reply had been lost on the way.
  int drop_push_reply_every = 0;
  // Called after every Init call that left the shard initialised (health reporting).
  std::function<void()> on_initialized;
  // Whether workers on this host may attach shared memory for their payloads.
  bool accept_shared_memory = true;
};

// Push and Pull are "raw" methods: their payloads are read and written as gRPC slices in place
// (common/transport/tensor_wire.h). All methods use the callback API; a pull that must wait for its
// consistency condition holds no thread (Shard::PullAsync).
// (The chain is spelled out rather than built on the generated CallbackService, whose typed Push
// and Pull the raw ones would hide.)
using ParameterServerServiceBase = ps::v1::ParameterServer::WithCallbackMethod_Register<
    ps::v1::ParameterServer::WithCallbackMethod_Heartbeat<
        ps::v1::ParameterServer::WithCallbackMethod_Init<
            ps::v1::ParameterServer::WithRawCallbackMethod_Pull<
                ps::v1::ParameterServer::WithRawCallbackMethod_Push<
                    ps::v1::ParameterServer::WithCallbackMethod_GetStatus<
                        ps::v1::ParameterServer::WithCallbackMethod_AttachSharedMemory<
                            ps::v1::ParameterServer::WithRawCallbackMethod_PushPull<
                                ps::v1::ParameterServer::Service>>>>>>>>;

class ParameterServerService final : public ParameterServerServiceBase {
 public:
  // `shard` must outlive the service.
  ParameterServerService(Shard& shard, ServiceOptions options)
      : shard_(shard), options_(std::move(options)) {}
  // The generated synchronous overloads (which abort) stay visible rather than hidden.
  using ParameterServerServiceBase::AttachSharedMemory;
  using ParameterServerServiceBase::GetStatus;
  using ParameterServerServiceBase::Heartbeat;
  using ParameterServerServiceBase::Init;
  using ParameterServerServiceBase::Pull;
  using ParameterServerServiceBase::Push;
  using ParameterServerServiceBase::PushPull;
  using ParameterServerServiceBase::Register;

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx,
                                     const ps::v1::RegisterRequest* req,
                                     ps::v1::RegisterResponse* resp) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const ps::v1::HeartbeatRequest* req,
                                      ps::v1::HeartbeatResponse* resp) override;
  grpc::ServerUnaryReactor* Init(grpc::CallbackServerContext* ctx, const ps::v1::InitRequest* req,
                                 ps::v1::InitResponse* resp) override;
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                 grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                 grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* PushPull(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* ctx,
                                      const ps::v1::GetStatusRequest* req,
                                      ps::v1::GetStatusResponse* resp) override;
  grpc::ServerUnaryReactor* AttachSharedMemory(grpc::CallbackServerContext* ctx,
                                               const ps::v1::AttachSharedMemoryRequest* req,
                                               ps::v1::AttachSharedMemoryResponse* resp) override;

  // The handlers behind the rpcs, callable without a call (tests and fuzzers). The token check
  // (Authenticate) comes before them in every rpc. HandlePull and HandlePushPull block while the
  // pull waits.
  grpc::Status HandleRegister(const ps::v1::RegisterRequest& req, ps::v1::RegisterResponse* resp);
  grpc::Status HandleHeartbeat(const ps::v1::HeartbeatRequest& req,
                               ps::v1::HeartbeatResponse* resp);
  grpc::Status HandleInit(const ps::v1::InitRequest& req, ps::v1::InitResponse* resp);
  grpc::Status HandlePush(const grpc::ByteBuffer& req, grpc::ByteBuffer* resp);
  grpc::Status HandlePull(const grpc::ByteBuffer& req, absl::Time deadline, grpc::ByteBuffer* resp);
  grpc::Status HandlePushPull(const grpc::ByteBuffer& req, absl::Time deadline,
                              grpc::ByteBuffer* resp);
  // Pull (or, `push_pull`, PushPull) for the local call path (server/local_call_server.h): parses
  // the request and applies a PushPull's push as the rpc would, then starts the pull without
  // holding a thread; `done` runs once, on whichever thread settles it, with the reply or the
  // error. Returns the pull's id for Shard::CancelPull, 0 when `done` has already run.
  int64_t StartPull(const grpc::ByteBuffer& req, bool push_pull, absl::Time deadline,
                    std::function<void(grpc::Status, grpc::ByteBuffer)> done);
  grpc::Status HandleGetStatus(ps::v1::GetStatusResponse* resp);
  grpc::Status HandleAttachSharedMemory(const ps::v1::AttachSharedMemoryRequest& req,
                                        ps::v1::AttachSharedMemoryResponse* resp);
  // OK when no token is configured or `metadata` carries it; UNAUTHENTICATED (counted) otherwise.
  grpc::Status Authenticate(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata);
  // The same for a token presented outside gRPC's metadata (the local call path).
  grpc::Status AuthenticateToken(absl::string_view token);

  int64_t rejected_unauthenticated() const { return rejected_unauthenticated_.load(); }
  // The version of the newest checkpoint written (-1: none), reported by GetStatus.
  void set_checkpoint_version(int64_t version) { checkpoint_version_.store(version); }
  // The local call path: the socket AttachSharedMemory names (set before serving), and the
  // count of the calls it answered.
  void set_local_socket(std::string name) { local_socket_ = std::move(name); }
  void CountLocalCall() { local_calls_.fetch_add(1); }
  void CancelPull(int64_t id) { shard_.CancelPull(id); }
  int64_t checkpoint_version() const { return checkpoint_version_.load(); }
  // Worker processes with an attached shared region, and the pushes and pulls whose payload
  // went through one.
  int shared_memory_workers() const;
  int64_t shared_memory_payloads() const { return shared_payloads_.load(); }

 private:
  // UNAUTHENTICATED with `why`, counted.
  grpc::Status Unauthenticated(const char* why);
  class PullReactor;
  // Where `pull`'s values go: the reply, or the caller's attached region. Asks the shard for a
  // loan of its values (pull->args.lend) when the reply is sent from them.
  absl::StatusOr<PullSink> SinkFor(ParsedPull* pull);
  // Pull and PushPull: the token, then `prepare` (parses the request into the pull and its sink;
  // PushPull also applies its push and sets the answer to send with the pull's), then the pull in
  // a reactor that holds no thread while it waits.
  grpc::ServerUnaryReactor* ServePull(
      grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp,
      absl::FunctionRef<absl::Status(ParsedPull*, PullSink*, std::optional<ps::v1::PushResponse>*)>
          prepare);
  // Push and PushPull: applies the push whose header and payload (gRPC's buffers, or a span of
  // the worker's region this fills in) are given; the answer to send.
  absl::StatusOr<ps::v1::PushResponse> ApplyPush(const ps::v1::PushRequest& header,
                                                 SplitMessage& split);
  // PushPull up to its pull: parses the request, prepares the pull's sink, then applies the
  // push. Nothing changes unless the push is applied.
  absl::Status PushThenPreparePull(const grpc::ByteBuffer& req, ParsedPull* pull, PullSink* sink,
                                   ps::v1::PushResponse* pushed);

  Shard& shard_;
  const ServiceOptions options_;
  std::atomic<int64_t> rejected_unauthenticated_{0};
  std::atomic<int64_t> checkpoint_version_{-1};
  std::atomic<int64_t> pushes_seen_{0};
  std::atomic<int64_t> shared_payloads_{0};
  std::string local_socket_;
  std::atomic<int64_t> local_calls_{0};
  WorkerRegions regions_;  // the shared regions workers on this host attached
};

}  // namespace ps

#endif  // PS_SERVER_SERVICE_H_
