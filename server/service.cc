#include "server/service.h"

#include <algorithm>
#include <chrono>

#include "absl/time/clock.h"
#include "common/grpc_security.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "common/tensor_bytes.h"
#include "common/tensor_codec.h"
#include "common/tensor_wire.h"

namespace ps {

namespace {

KeyRange RangeOf(int64_t begin, int64_t end) { return KeyRange{begin, end}; }

absl::Status CheckRange(int64_t begin, int64_t end) {
  if (begin < 0 || end < begin) {
    return absl::InvalidArgumentError(absl::StrCat("malformed key range [", begin, ", ", end, ")"));
  }
  return absl::OkStatus();
}

// Compares in time independent of where the strings differ, so the token cannot be guessed
// byte by byte from response times.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

constexpr int kPushGradientField = ps::v1::PushRequest::kGradientFieldNumber;
constexpr int kPullValuesField = ps::v1::PullResponse::kValuesFieldNumber;

// The slice encoded into fresh payload slices (the one copy a pull makes: the shard's values
// change under later pushes, so the reply must be a snapshot).
std::vector<grpc::Slice> EncodeValues(TensorEncoding encoding, absl::Span<const float> values) {
  const int unit = UnitBytes(encoding);
  std::vector<grpc::Slice> slices = AllocatePayloadSlices(values.size() * unit, unit);
  size_t at = 0;
  for (grpc::Slice& slice : slices) {
    const size_t n = slice.size() / unit;
    EncodeDense(encoding, values.subspan(at, n), MutableSliceData(slice));
    at += n;
  }
  return slices;
}

grpc::ByteBuffer PullReply(const Shard::PullResult& r, TensorEncoding encoding,
                           std::vector<grpc::Slice> payload) {
  ps::v1::PullResponse header;
  header.set_version(r.version);
  header.set_min_clock(r.min_clock);
  header.set_wait_us(absl::ToInt64Microseconds(r.waited));
  header.set_encoding(static_cast<ps::v1::TensorEncoding>(encoding));
  return JoinPayloadMessage(header, kPullValuesField, std::move(payload));
}

struct ParsedPull {
  Shard::PullArgs args;
  TensorEncoding encoding = TensorEncoding::kF32;
};

absl::StatusOr<ParsedPull> ParsePull(const grpc::ByteBuffer& buffer) {
  ps::v1::PullRequest req;
  RETURN_IF_ERROR(ParseFromByteBuffer(buffer, &req));
  RETURN_IF_ERROR(CheckRange(req.begin(), req.end()));
  ParsedPull p;
  ASSIGN_OR_RETURN(p.encoding, TensorEncodingFromWire(req.encoding()));
  if (!IsDenseEncoding(p.encoding)) {
    return absl::InvalidArgumentError("weights travel as F32, BF16 or FP16, not TOPK");
  }
  p.args.rank = req.rank();
  p.args.incarnation = req.incarnation();
  p.args.shard_incarnation = req.shard_incarnation();
  p.args.fingerprint = req.layout_fingerprint();
  p.args.range = RangeOf(req.begin(), req.end());
  p.args.clock = req.clock();
  p.args.no_wait = req.no_wait();
  return p;
}

}  // namespace

// One pull in flight: it finishes from whichever thread settles it in the shard, and cancels
// the shard's waiting entry when its caller goes away.
class ParameterServerService::PullReactor final : public grpc::ServerUnaryReactor {
 public:
  PullReactor(Shard& shard, grpc::ByteBuffer* response) : shard_(shard), response_(response) {}

  void Start(const ParsedPull& pull, absl::Time deadline) {
    encoding_ = pull.encoding;
    const int64_t id = shard_.PullAsync(
        pull.args, deadline,
        [this](absl::Span<const float> values) { payload_ = EncodeValues(encoding_, values); },
        [this](absl::StatusOr<Shard::PullResult> r) {
          if (r.ok()) *response_ = PullReply(*r, encoding_, std::move(payload_));
          Finish(r.ok() ? grpc::Status::OK : ToGrpcStatus(r.status()));
        });
    bool cancelled;
    {
      absl::MutexLock lock(&mu_);
      id_ = id;
      cancelled = cancelled_;
    }
    if (cancelled && id != 0) shard_.CancelPull(id);
  }

  void OnCancel() override {
    int64_t id;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      id = id_;
    }
    if (id != 0) shard_.CancelPull(id);  // a no-op when the pull has settled
  }
  void OnDone() override { delete this; }

 private:
  Shard& shard_;
  grpc::ByteBuffer* const response_;
  TensorEncoding encoding_ = TensorEncoding::kF32;
  std::vector<grpc::Slice> payload_;
  absl::Mutex mu_;
  int64_t id_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

grpc::Status ParameterServerService::Authenticate(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) {
  if (options_.token.empty()) return grpc::Status::OK;
  const auto it = metadata.find(kAuthorizationHeader);
  const std::string expected = absl::StrCat(kBearerPrefix, options_.token);
  if (it != metadata.end() &&
      ConstantTimeEquals(absl::string_view(it->second.data(), it->second.size()), expected)) {
    return grpc::Status::OK;
  }
  rejected_unauthenticated_.fetch_add(1);
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      it == metadata.end() ? "the call carries no cluster token"
                                           : "the call carries a wrong cluster token");
}

namespace {

// Every unary rpc but Pull: the token first (an unauthenticated call runs no handler code),
// then the handler, answered at once on the calling thread.
template <typename Handler>
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx, grpc::Status auth,
                                 Handler handler) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(auth.ok() ? handler() : auth);
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* ParameterServerService::Register(grpc::CallbackServerContext* ctx,
                                                           const ps::v1::RegisterRequest* req,
                                                           ps::v1::RegisterResponse* resp) {
  return Answer(ctx, Authenticate(ctx->client_metadata()),
                [&] { return HandleRegister(*req, resp); });
}

grpc::ServerUnaryReactor* ParameterServerService::Heartbeat(grpc::CallbackServerContext* ctx,
                                                            const ps::v1::HeartbeatRequest* req,
                                                            ps::v1::HeartbeatResponse* resp) {
  return Answer(ctx, Authenticate(ctx->client_metadata()),
                [&] { return HandleHeartbeat(*req, resp); });
}

grpc::ServerUnaryReactor* ParameterServerService::Init(grpc::CallbackServerContext* ctx,
                                                       const ps::v1::InitRequest* req,
                                                       ps::v1::InitResponse* resp) {
  return Answer(ctx, Authenticate(ctx->client_metadata()), [&] { return HandleInit(*req, resp); });
}

grpc::ServerUnaryReactor* ParameterServerService::Push(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* req,
                                                       grpc::ByteBuffer* resp) {
  return Answer(ctx, Authenticate(ctx->client_metadata()), [&] { return HandlePush(*req, resp); });
}

grpc::ServerUnaryReactor* ParameterServerService::GetStatus(grpc::CallbackServerContext* ctx,
                                                            const ps::v1::GetStatusRequest*,
                                                            ps::v1::GetStatusResponse* resp) {
  return Answer(ctx, Authenticate(ctx->client_metadata()), [&] { return HandleGetStatus(resp); });
}

grpc::ServerUnaryReactor* ParameterServerService::Pull(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* req,
                                                       grpc::ByteBuffer* resp) {
  auto* reactor = new PullReactor(shard_, resp);
  grpc::Status auth = Authenticate(ctx->client_metadata());
  if (!auth.ok()) {
    reactor->Finish(auth);
    return reactor;
  }
  absl::StatusOr<ParsedPull> pull = ParsePull(*req);
  if (!pull.ok()) {
    reactor->Finish(ToGrpcStatus(pull.status()));
    return reactor;
  }
  reactor->Start(*pull,
                 std::min(absl::FromChrono(ctx->deadline()), absl::Now() + options_.max_pull_wait));
  return reactor;
}

grpc::Status ParameterServerService::HandleRegister(const ps::v1::RegisterRequest& req,
                                                    ps::v1::RegisterResponse* resp) {
  absl::StatusOr<Shard::RegisterResult> r =
      shard_.Register(req.rank(), req.layout_fingerprint(), req.incarnation());
  if (!r.ok()) return ToGrpcStatus(r.status());
  const ShardStatus status = shard_.GetStatus();
  resp->set_shard_id(status.shard_id);
  resp->set_num_shards(status.num_shards);
  resp->set_num_workers(static_cast<int32_t>(status.workers.size()));
  resp->set_clock(r->clock);
  resp->set_initialized(r->initialized);
  resp->set_mode(ConsistencyModeName(status.mode));
  resp->set_staleness(status.staleness_bound);
  resp->set_lease_ms(absl::ToInt64Milliseconds(shard_.options().lease));
  resp->set_shard_incarnation(shard_.options().incarnation);
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::HandleHeartbeat(const ps::v1::HeartbeatRequest& req,
                                                     ps::v1::HeartbeatResponse* resp) {
  resp->set_lease_ms(absl::ToInt64Milliseconds(shard_.options().lease));
  return ToGrpcStatus(
      shard_.Heartbeat(Caller{req.rank(), req.incarnation(), req.shard_incarnation()}));
}

grpc::Status ParameterServerService::HandleInit(const ps::v1::InitRequest& req,
                                                ps::v1::InitResponse* resp) {
  absl::Status s = CheckRange(req.begin(), req.end());
  if (!s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<absl::Span<const float>> values = FloatView(req.values(), "values");
  if (!values.ok()) return ToGrpcStatus(values.status());
  absl::StatusOr<Shard::InitResult> r = shard_.Init(req.layout_fingerprint(), req.total_params(),
                                                    RangeOf(req.begin(), req.end()), *values);
  if (!r.ok()) return ToGrpcStatus(r.status());
  resp->set_already_initialized(r->already_initialized);
  resp->set_version(r->version);
  if (options_.on_initialized) options_.on_initialized();
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::HandlePull(const grpc::ByteBuffer& req, absl::Time deadline,
                                                grpc::ByteBuffer* resp) {
  absl::StatusOr<ParsedPull> pull = ParsePull(req);
  if (!pull.ok()) return ToGrpcStatus(pull.status());
  std::vector<grpc::Slice> payload;
  const TensorEncoding encoding = pull->encoding;
  absl::StatusOr<Shard::PullResult> r = shard_.Pull(
      pull->args, std::min(deadline, absl::Now() + options_.max_pull_wait),
      [&](absl::Span<const float> values) { payload = EncodeValues(encoding, values); });
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = PullReply(*r, encoding, std::move(payload));
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::HandlePush(const grpc::ByteBuffer& req,
                                                grpc::ByteBuffer* resp) {
  ps::v1::PushRequest header;
  SplitMessage split;  // holds gRPC's buffers: the gradient is read in place
  absl::Status s = SplitPayloadMessage(req, kPushGradientField, &header, &split);
  if (s.ok()) s = CheckRange(header.begin(), header.end());
  if (!s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<TensorEncoding> encoding = TensorEncodingFromWire(header.encoding());
  if (!encoding.ok()) return ToGrpcStatus(encoding.status());
  absl::StatusOr<EncodedTensor> gradient =
      EncodedTensor::FromChunks(*encoding, header.end() - header.begin(), split.payload);
  if (!gradient.ok()) return ToGrpcStatus(gradient.status());
  Shard::PushArgs args;
  args.rank = header.rank();
  args.incarnation = header.incarnation();
  args.shard_incarnation = header.shard_incarnation();
  args.fingerprint = header.layout_fingerprint();
  args.range = RangeOf(header.begin(), header.end());
  args.clock = header.clock();
  args.base_version = header.base_version();
  args.gradient = std::move(*gradient);
  absl::StatusOr<Shard::PushResult> r = shard_.Push(args);
  if (!r.ok()) return ToGrpcStatus(r.status());
  const int every = options_.drop_push_reply_every;
  if (every > 0 && (pushes_seen_.fetch_add(1) + 1) % every == 0) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "fault injection: the reply of this accepted push was dropped");
  }
  ps::v1::PushResponse out;
  out.set_applied(r->applied);
  out.set_buffered(r->buffered);
  out.set_duplicate(r->duplicate);
  out.set_version(r->version);
  out.set_staleness(r->staleness);
  out.set_dropped(r->dropped);
  out.set_late(r->late);
  out.set_staged(r->staged);
  *resp = SerializeToByteBuffer(out);
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::HandleGetStatus(ps::v1::GetStatusResponse* resp) {
  const ShardStatus s = shard_.GetStatus();
  resp->set_shard_id(s.shard_id);
  resp->set_num_shards(s.num_shards);
  resp->set_mode(ConsistencyModeName(s.mode));
  resp->set_staleness(s.staleness_bound);
  resp->set_initialized(s.initialized);
  resp->set_begin(s.range.begin);
  resp->set_end(s.range.end);
  resp->set_version(s.version);
  resp->set_min_clock(s.min_clock);
  resp->set_rejected_nonfinite(s.rejected_nonfinite);
  resp->set_layout_fingerprint(s.fingerprint);
  resp->set_update_rule(UpdateRuleName(shard_.options().update_rule.rule));
  resp->set_backup_workers(shard_.options().consistency.backup_workers);
  resp->set_shard_incarnation(shard_.options().incarnation);
  resp->set_restored_version(s.restored_version);
  resp->set_checkpoint_version(checkpoint_version_.load());
  resp->set_pushes_accepted(s.pushes_accepted);
  resp->set_pushes_duplicate(s.pushes_duplicate);
  resp->set_pieces_received(s.pieces_received);
  resp->set_rejected_unauthenticated(rejected_unauthenticated_.load());
  for (const WorkerStatusInfo& w : s.workers) {
    ps::v1::WorkerStatus* out = resp->add_workers();
    out->set_rank(w.rank);
    out->set_clock(w.clock);
    out->set_state(WorkerStateName(w.state));
    out->set_applied(w.staleness.count());
    out->set_max_staleness(w.staleness.max());
    out->set_mean_staleness(w.staleness.mean());
    for (int64_t c : w.staleness.TrimmedCounts()) out->add_staleness_counts(c);
    out->set_dropped(w.dropped);
    out->set_late(w.late);
  }
  return grpc::Status::OK;
}

}  // namespace ps
