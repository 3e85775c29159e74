#ifndef PS_WORKER_GRPC_PARAMETER_CLIENT_H_
#define PS_WORKER_GRPC_PARAMETER_CLIENT_H_

// ParameterClient over gRPC: one channel per shard; every operation issues its calls (one per
// shard, or one per piece of a part for PullParts/PushParts) at once on a completion queue and
// waits for all of them. Push and Pull are raw calls: a float32
// gradient is sent straight from the caller's buffer (gRPC borrows it; Push returns only once gRPC
// has released it) and pulled values are decoded straight from gRPC's receive buffers into the
// caller's (common/transport/tensor_wire.h). Every call has a deadline. UNAVAILABLE answers
// (a shard restarting, a lost reply), and CANCELLED ones this client did not cause (a server
// shutting down cancels the calls it has not started), are retried with exponential backoff for up
// to `retry_for`, which is safe because every rpc is idempotent: pushes are deduplicated by
// (worker, clock) on the shard. Calls carry this process's incarnation and the incarnation of the
// shard process it registered with, so a shard that restarted answers ABORTED and the trainer
// registers again.

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/codec/tensor_codec.h"
#include "common/shm/shared_memory.h"
#include "common/shm/shared_region_layout.h"
#include "common/transport/grpc_security.h"
#include "common/transport/tensor_wire.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/parameter_server.grpc.pb.h"
#include "worker/local_channel.h"
#include "worker/parameter_client.h"
#include "worker/piece_plan.h"
#include "worker/shard_fanout.h"
#include "worker/shared_region.h"

namespace ps {

struct GrpcClientOptions {
  std::vector<std::string> servers;                 // host:port of shard 0, 1, ... in order
  uint64_t fingerprint = 0;                         // of the model's ParamDescription
  int64_t total_params = 0;                         // N of the dense layout
  std::vector<SparseTableSpec> tables;              // the model's sparse tables, declared at Init
  int rank = 0;                                     // this worker; ignored by observers
  absl::Duration call_timeout = absl::Seconds(30);  // Register, Init, Push, GetStatus
  absl::Duration pull_timeout = absl::Minutes(10);  // a pull may wait for slow workers
  // Keep retrying UNAVAILABLE this long; infinite: as long as it takes (a shard that restarts
  // comes back; the launcher or orchestrator ends a job whose shard is gone for good).
  absl::Duration retry_for = absl::InfiniteDuration();
  // A shard unreachable this long or more is reported (a warning, then one per interval).
  absl::Duration report_unreachable_every = absl::Seconds(10);
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
  // Large transfers: a shard's range (or part of it) travels in calls of at most this many
  // float32 bytes, all in flight together (0: one call per shard and part). The shard takes the
  // chunks of a push as pieces of one step.
  int64_t chunk_bytes = 0;
  // TCP connections per shard; a transfer's chunks are spread over them round-robin.
  int connections = 1;
  // With chunk_bytes 0, under BSP: a pull of at least 512 KiB from a worker's only shard, payload
  // in the messages, travels as two or more calls of at most 2 MiB over two connections. One HTTP/2
  // stream leaves its two ends waiting on each other on a two-core host; two in flight measured
  // 1.2-1.4x on loopback and 1.5x across a veth pair at 16 and 64 MiB (docs/performance.md).
  bool split_lone_pulls = true;
  // The same for pushes (without sparse rows, which travel with whole pushes): under BSP the shard
  // gathers the pieces in the worker's round buffer, which it holds anyway, so they cost it no
  // staging slice. A PushPull of at least push_pull_split_bytes then goes as a split push and a
  // split pull; a smaller one stays one call.
  bool split_lone_pushes = true;
  int64_t push_pull_split_bytes = kLonePushPullSplitFrom;
  // Move payloads through a shared-memory region (common/shm/shared_memory.h) with every shard that
  // can open it, i.e. runs on this host; the others, and any call that finds its part of the
  // region lent to another call, carry them in the gRPC messages.
  bool shared_memory = false;
  // Sets of buffers (gradient and weights) in the region: 2 for a caller that computes one step
  // while the next travels (TakeTransportBuffers(0) and (1)).
  int shared_memory_slots = 1;
  // With shared memory: Push, Pull and PushPull to a shard that took the region go over its
  // local socket (common/transport/local_frames.h) when it offers one, not through gRPC's
  // HTTP/2; a call the socket cannot carry, or one whose socket breaks, goes over gRPC.
  bool local_calls = true;
};

// A shard's GetStatus answer as the report Status() returns; INVALID_ARGUMENT for a mode this
// build does not know.
absl::StatusOr<ShardReport> ShardReportFromResponse(const ps::v1::GetStatusResponse& r);

// INVALID_ARGUMENT for options no client can run with (encodings, transfer sizes, top-k ratio,
// shared-memory slots, retry time); the server list aside. Create() checks them; ps_worker
// --check_only too, before any server is known.
absl::Status ValidateGrpcClientOptions(const GrpcClientOptions& options);

class GrpcParameterClient final : public ParameterClient {
 public:
  // INVALID_ARGUMENT for an empty server list, one that is not host:port, or options that
  // ValidateGrpcClientOptions refuses.
  static absl::StatusOr<std::unique_ptr<GrpcParameterClient>> Create(
      const GrpcClientOptions& options);

  absl::StatusOr<ClusterInfo> Register(int rank, absl::Duration timeout) override;
  absl::Status Heartbeat() override;
  absl::Status Leave() override;
  void SetWorkPlan(int64_t steps, int64_t samples_per_step) override;
  absl::Status Init(absl::Span<const float> params) override;
  absl::StatusOr<PullStats> Pull(int64_t clock, bool no_wait, absl::Span<float> params) override;
  absl::StatusOr<PushStats> Push(int64_t clock, const std::vector<int64_t>& base_versions,
                                 int num_samples, absl::Span<const float> gradient) override;
  absl::StatusOr<PullStats> PullParts(int64_t clock, absl::Span<const KeyRange> parts,
                                      absl::Span<float> params,
                                      const std::function<void(size_t)>& on_part) override;
  absl::StatusOr<PushStats> PushParts(int64_t clock, const std::vector<int64_t>& base_versions,
                                      int num_samples, absl::Span<const float> gradient,
                                      absl::Span<const KeyRange> parts) override;
  // One PushPull call per shard, with `gradient` and `params` each in the shared region as Push
  // and Pull would use it. Transfers cut into chunks take a Push and a Pull: a shard applies
  // the step only once all its chunks are in, so no chunk's pull may start before that.
  absl::StatusOr<PushPullStats> PushPull(int64_t clock, const std::vector<int64_t>& base_versions,
                                         int num_samples, absl::Span<const float> gradient,
                                         int64_t pull_clock, absl::Span<float> params) override;
  // Rows go with the first call to each shard. A push of rows needs whole pushes (chunk_bytes
  // 0): FAILED_PRECONDITION otherwise.
  absl::StatusOr<PullStats> PullWithRows(int64_t clock, bool no_wait, absl::Span<float> params,
                                         absl::Span<const RowsToPull> rows) override;
  // One call to each shard that owns some of the keys, with an empty range of its slice.
  absl::Status PullRows(int64_t clock, absl::Span<const RowsToPull> rows) override;
  // The rows of step `clock` alone, as this worker's pull (waiting as the mode says, and under
  // BSP naming the keys its push of `clock` may carry), for a caller that holds the step's dense
  // weights already and learns the step's keys only as it computes (the Python package's
  // embedding lookups). Several calls for one clock add up on the shards.
  absl::Status PullStepRows(int64_t clock, absl::Span<const RowsToPull> rows);
  absl::StatusOr<PushStats> PushWithRows(int64_t clock, const std::vector<int64_t>& base_versions,
                                         int num_samples, absl::Span<const float> gradient,
                                         absl::Span<const RowsToPush> rows) override;
  absl::StatusOr<PushPullStats> PushPullWithRows(int64_t clock,
                                                 const std::vector<int64_t>& base_versions,
                                                 int num_samples, absl::Span<const float> gradient,
                                                 absl::Span<const RowsToPush> push_rows,
                                                 int64_t pull_clock, absl::Span<float> params,
                                                 absl::Span<const RowsToPull> pull_rows) override;
  absl::StatusOr<std::vector<ShardReport>> Status() override;
  void Cancel() override;
  // The region's areas (common/shm/shared_memory.h), float32 transfers only: `weights` when weights
  // are pulled as f32, `gradient` when gradients are pushed as f32.
  TransportBuffers TakeTransportBuffers(int set) override;
  uint64_t incarnation() const { return options_.incarnation; }
  // Shards whose payloads go through shared memory (since the last Register).
  int shared_memory_shards() const;

 private:
  using Stub = ps::v1::ParameterServer::Stub;
  template <typename Request, typename Response>
  using StartFn = std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> (Stub::*)(
      grpc::ClientContext*, const Request&, grpc::CompletionQueue*);
  // A raw (ByteBuffer) call of `method`, e.g. "/ps.v1.ParameterServer/Push".
  struct RawMethod {
    const char* path;
  };

  // One call's share of a part: the part's keys within one shard's range.

  explicit GrpcParameterClient(const GrpcClientOptions& options);
  KeyRange range(int shard) const;
  // What a transfer's pieces are for: a lone shard's pulls and pushes may be split further
  // (split_lone_pulls, split_lone_pushes); a PushPull's and a push with sparse rows may not.
  enum class Transfer { kPull, kPush, kWhole };
  // `parts` cut at the shards' boundaries and into chunks of at most chunk_bytes, in order.
  // INVALID_ARGUMENT for an empty part or one outside the layout.
  absl::StatusOr<std::vector<Piece>> SplitAtShards(absl::Span<const KeyRange> parts,
                                                   Transfer transfer) const;
  // What of split_lone_pulls / split_lone_pushes the options decide: asked for, no explicit
  // chunks, one shard.
  bool LoneTransfersMaySplit(Transfer transfer) const {
    const bool asked = transfer == Transfer::kPull   ? options_.split_lone_pulls
                       : transfer == Transfer::kPush ? options_.split_lone_pushes
                                                     : false;
    return asked && options_.chunk_bytes == 0 && options_.servers.size() == 1;
  }
  // Whether a transfer of `bytes` is cut as LoneTransfersMaySplit says (adds the mode and the
  // transport).
  bool SplitsLoneTransfer(Transfer transfer, int64_t bytes) const;
  // A piece's push: its header, and its payload (empty when in the region).
  struct PreparedPush {
    ps::v1::PushRequest header;
    std::vector<grpc::Slice> payload;
    int slot = -1;  // whose gradient area's part of the piece is lent to this call; -1: none
    int64_t payload_bytes = 0;
  };
  // Encodes piece i (of a push or PushPull) of `gradient`: borrowed by `borrowed`, in the
  // client's encode buffer i, or in a gradient area lent to the call by `leases` (`direct_slot`
  // >= 0: the caller's buffer is that slot's area).
  PreparedPush PreparePush(size_t i, const Piece& piece, int64_t clock, int64_t base_version,
                           int num_samples, absl::Span<const float> gradient, int direct_slot,
                           uint64_t shard_incarnation, BorrowedPayload& borrowed,
                           SharedRegion::Leases& leases);
  // A piece's pull request (`slot` >= 0: into that slot's weights area, lent to the call).
  ps::v1::PullRequest PullHeader(const Piece& piece, int64_t clock, bool no_wait, int slot,
                                 uint64_t shard_incarnation) const;
  // Decodes a piece's pulled values (in `split` or slot `slot`'s weights area) into `params`
  // (unless `direct`: the shard wrote them there) and adds to `stats`; INVALID_ARGUMENT for
  // values that do not fit the piece.
  absl::Status DecodePulled(const Piece& piece, const ps::v1::PullResponse& header,
                            SplitMessage& split, int slot, bool direct, absl::Span<float> params,
                            PullStats* stats) const;
  // PullRows and PullStepRows: an observer's read (no_wait) or the worker's.
  absl::Status PullRowsAlone(int64_t clock, bool no_wait, absl::Span<const RowsToPull> rows);
  static absl::Status ReplyDoesNotFit(const char* method, int shard, const absl::Status& why);
  // What each piece of one push call came to, for top-k's error feedback.
  struct PushOutcomes {
    explicit PushOutcomes(size_t pieces) : answered(pieces, 0), duplicate(pieces, 0) {}
    void Answered(size_t i, const ps::v1::PushResponse& r) {
      answered[i] = 1;
      duplicate[i] = r.duplicate();
    }
    std::vector<char> answered;   // the shard answered OK
    std::vector<char> duplicate;  // ... that it had this piece already (applied or staged)
    std::vector<int> sends;       // times each piece went out (CallRaw)
  };
  // Top-k sends part of its residual with each piece and keeps the rest; a piece its shard did
  // not take would lose what it carried. Those pieces' residual goes back to what it was before
  // the call: a failed piece (the trainer computes the step again from the shards' clock), and a
  // duplicate of an earlier call's push (the shard has the step from that call, whose residual
  // stands). A duplicate that answers a piece sent twice in this call is its own first send,
  // taken: the reply was lost, not the push.
  void SettleTopK(const std::vector<Piece>& pieces, const PushOutcomes& outcomes);
  static void CountPush(const ps::v1::PushResponse& r, PushStats* stats);
  // Pull and PullParts: one raw call per piece; each piece is decoded into `params` as it
  // arrives, and on_part(i) runs once part i's pieces have all arrived.
  absl::StatusOr<PullStats> PullPieces(int64_t clock, bool no_wait,
                                       absl::Span<const KeyRange> parts, absl::Span<float> params,
                                       const std::function<void(size_t)>& on_part,
                                       absl::Span<const RowsToPull> rows = {});
  // Push and PushParts; `rows` go with each shard's first piece.
  absl::StatusOr<PushStats> PushPieces(int64_t clock, const std::vector<int64_t>& base_versions,
                                       int num_samples, absl::Span<const float> gradient,
                                       absl::Span<const KeyRange> parts,
                                       absl::Span<const RowsToPush> rows);
  // The index of each shard's first piece (-1: none).
  std::vector<int> FirstPieceOfShard(const std::vector<Piece>& pieces) const;
  // One request per shard with the layout fingerprint and the shard's key range filled in.
  template <typename Request>
  std::vector<Request> RequestsPerShard() const;
  // One call per shard, all in flight together; retries UNAVAILABLE. The error returned names
  // the method and the shard.
  // `retry` false: one attempt per shard (heartbeats, which come again soon anyway).
  // `each_status`, if given: every call's outcome, not only the first error's; the calls are then
  // independent (a failure does not cancel the others).
  template <typename Request, typename Response>
  absl::Status CallAll(const char* method, StartFn<Request, Response> start,
                       const std::vector<Request>& requests, std::vector<Response>* responses,
                       absl::Duration timeout, bool wait_for_ready, bool retry = true,
                       std::vector<absl::Status>* each_status = nullptr);
  // Raw calls, call i to pieces[i]'s shard over its connection, all in flight together;
  // on_ok(i), if given, runs on this thread as soon as call i has succeeded. `sends`, if given:
  // how many times each request went out, over the local channel and gRPC together.
  absl::Status CallRaw(const char* method, RawMethod raw, const std::vector<Piece>& pieces,
                       const std::vector<grpc::ByteBuffer>& requests,
                       std::vector<grpc::ByteBuffer>* responses, absl::Duration timeout,
                       const std::function<void(size_t)>& on_ok = nullptr,
                       std::vector<int>* sends = nullptr);
  // How many of a call's pieces CallRaw keeps in flight (0: all of them).
  size_t LoneShardWindow() const;
  // CallRaw over the local channels, when every piece goes to its own shard and that shard's
  // channel is free. Sets answered[i] for each piece answered (on_ok(i) has run) and counts each
  // request written in sends[i]. Returns the call's outcome, or nothing when the pieces not
  // answered should go over gRPC: no channel, one that broke (a shard restarted, CancelCallsTo)
  // or an UNAVAILABLE answer (a shard shutting down), which gRPC's retries handle.
  std::optional<absl::Status> CallLocal(const char* method, RawMethod raw,
                                        const std::vector<Piece>& pieces,
                                        const std::vector<grpc::ByteBuffer>& requests,
                                        std::vector<grpc::ByteBuffer>* responses,
                                        absl::Duration timeout,
                                        const std::function<void(size_t)>& on_ok,
                                        std::vector<char>* answered, std::vector<int>* sends);
  // Breaks `channel` (shard `shard`'s) and forgets it: later calls to the shard use gRPC until
  // the next Register connects again.
  void DropLocal(int shard, const std::shared_ptr<LocalChannel>& channel);
  // Connects shard `shard`'s local channel to its socket `name` (none when that fails or `name` is
  // empty).
  void ConnectLocal(size_t shard, const std::string& name);
  // The loop behind both: `start(i, ctx, cq)` starts call i (to shard shards[i]) and returns its
  // reader.
  template <typename Response, typename Start>
  absl::Status CallEach(const char* method, const std::vector<int>& shards, Start start,
                        std::vector<Response>* responses, absl::Duration timeout,
                        bool wait_for_ready, const std::function<void(size_t)>& on_ok,
                        bool retry = true, std::vector<absl::Status>* each_status = nullptr,
                        size_t max_in_flight = 0, std::vector<int>* attempts = nullptr);
  // Cancels the calls in flight to `shard` as the shard would (CANCELLED, which this client
  // retries): for calls that wait on a process that is gone.
  void CancelCallsTo(int shard);
  // One heartbeat to every shard, renewing the lease or (`leaving`) ending it.
  absl::Status Beat(bool leaving);
  // The declared work, as sent with Register and Heartbeat.
  void FillPlan(ps::v1::WorkPlan* plan) const;
  std::vector<int> EveryShard() const;  // {0, 1, ..., S-1}

  GrpcClientOptions options_;
  ShardFanout fanout_;  // every call to the shards goes through it
  std::vector<std::unique_ptr<Stub>> stubs_;
  // [shard][connection]; connection 0 is the typed stub's channel.
  std::vector<std::vector<std::unique_ptr<grpc::GenericStub>>> raw_stubs_;
  std::vector<std::vector<char>> encoded_;  // compressed gradients, per piece of a push
  std::unique_ptr<TopKCompressor> topk_;    // error feedback state
  // Per-shard call settings: deadline, wait-for-ready and the token.
  void Prepare(grpc::ClientContext* ctx, absl::Duration timeout, bool wait_for_ready) const;
  std::vector<uint64_t> shard_incarnations() const;

  // Shared memory (worker/shared_region.h): created at the first Register when asked for; null
  // otherwise.
  using Area = RegionArea;
  // Offers the region to every shard; the shards that can open it take payloads through it.
  void AttachSharedMemory(const std::vector<uint64_t>& shard_incarnation);
  // The slot whose `area` the caller took and `data` starts; -1: none.
  int DirectSlot(Area area, const float* data) const {
    return region_ == nullptr ? -1 : region_->DirectSlot(area, data);
  }
  std::unique_ptr<SharedRegion> region_;
  // Per shard, the local call channel (null: none; local_channel.h).
  mutable absl::Mutex local_mu_;
  std::vector<std::shared_ptr<LocalChannel>> local_ ABSL_GUARDED_BY(local_mu_);
  // The shards run BSP (as the last Register found): a split pull's pieces read one version.
  std::atomic<bool> bsp_{false};

  mutable absl::Mutex mu_;
  int64_t planned_steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t samples_per_step_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration lease_ ABSL_GUARDED_BY(mu_) = absl::Seconds(10);  // the shortest, at Register
  // The shards' incarnations from the last Register (0 until then).
  std::vector<uint64_t> shard_incarnations_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_WORKER_GRPC_PARAMETER_CLIENT_H_
