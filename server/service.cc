#include "server/service.h"

#include <algorithm>
#include <chrono>

#include "absl/time/clock.h"
#include "common/grpc_security.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "common/tensor_bytes.h"

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

}  // namespace

grpc::Status ParameterServerService::Authenticate(const grpc::ServerContext* ctx) {
  if (options_.token.empty()) return grpc::Status::OK;
  const auto& metadata = ctx->client_metadata();
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

// Every handler starts with this: an unauthenticated call runs no handler code.
#define PS_AUTHENTICATE_OR_RETURN(ctx)                      \
  do {                                                      \
    const grpc::Status ps_auth_status_ = Authenticate(ctx); \
    if (!ps_auth_status_.ok()) return ps_auth_status_;      \
  } while (false)

grpc::Status ParameterServerService::Register(grpc::ServerContext* ctx,
                                              const ps::v1::RegisterRequest* req,
                                              ps::v1::RegisterResponse* resp) {
  PS_AUTHENTICATE_OR_RETURN(ctx);
  absl::StatusOr<Shard::RegisterResult> r =
      shard_.Register(req->rank(), req->layout_fingerprint(), req->incarnation());
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

grpc::Status ParameterServerService::Heartbeat(grpc::ServerContext* ctx,
                                               const ps::v1::HeartbeatRequest* req,
                                               ps::v1::HeartbeatResponse* resp) {
  PS_AUTHENTICATE_OR_RETURN(ctx);
  resp->set_lease_ms(absl::ToInt64Milliseconds(shard_.options().lease));
  return ToGrpcStatus(
      shard_.Heartbeat(Caller{req->rank(), req->incarnation(), req->shard_incarnation()}));
}

grpc::Status ParameterServerService::Init(grpc::ServerContext* ctx, const ps::v1::InitRequest* req,
                                          ps::v1::InitResponse* resp) {
  PS_AUTHENTICATE_OR_RETURN(ctx);
  absl::Status s = CheckRange(req->begin(), req->end());
  if (!s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<absl::Span<const float>> values = FloatView(req->values(), "values");
  if (!values.ok()) return ToGrpcStatus(values.status());
  absl::StatusOr<Shard::InitResult> r = shard_.Init(req->layout_fingerprint(), req->total_params(),
                                                    RangeOf(req->begin(), req->end()), *values);
  if (!r.ok()) return ToGrpcStatus(r.status());
  resp->set_already_initialized(r->already_initialized);
  resp->set_version(r->version);
  if (options_.on_initialized) options_.on_initialized();
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Pull(grpc::ServerContext* ctx, const ps::v1::PullRequest* req,
                                          ps::v1::PullResponse* resp) {
  PS_AUTHENTICATE_OR_RETURN(ctx);
  absl::Status s = CheckRange(req->begin(), req->end());
  if (!s.ok()) return ToGrpcStatus(s);
  Shard::PullArgs args;
  args.rank = req->rank();
  args.incarnation = req->incarnation();
  args.shard_incarnation = req->shard_incarnation();
  args.fingerprint = req->layout_fingerprint();
  args.range = RangeOf(req->begin(), req->end());
  args.clock = req->clock();
  args.no_wait = req->no_wait();
  const absl::Time deadline =
      std::min(absl::FromChrono(ctx->deadline()), absl::Now() + options_.max_pull_wait);
  // The slice is copied once, straight into the response's bytes field. That buffer is sized
  // only for the range the shard holds: a request naming any other range (a huge one included)
  // gets its error from the shard without the server allocating what it asks for.
  const bool owned = args.range == shard_.range();
  absl::Span<float> out = ResizeForFloats(resp->mutable_values(), owned ? args.range.size() : 0);
  absl::StatusOr<Shard::PullResult> r = shard_.Pull(args, deadline, out);
  if (!r.ok()) {
    resp->clear_values();
    return ToGrpcStatus(r.status());
  }
  resp->set_version(r->version);
  resp->set_min_clock(r->min_clock);
  resp->set_wait_us(absl::ToInt64Microseconds(r->waited));
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Push(grpc::ServerContext* ctx, const ps::v1::PushRequest* req,
                                          ps::v1::PushResponse* resp) {
  PS_AUTHENTICATE_OR_RETURN(ctx);
  absl::Status s = CheckRange(req->begin(), req->end());
  if (!s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<absl::Span<const float>> grad = FloatView(req->gradient(), "gradient");
  if (!grad.ok()) return ToGrpcStatus(grad.status());
  Shard::PushArgs args;
  args.rank = req->rank();
  args.incarnation = req->incarnation();
  args.shard_incarnation = req->shard_incarnation();
  args.fingerprint = req->layout_fingerprint();
  args.range = RangeOf(req->begin(), req->end());
  args.clock = req->clock();
  args.base_version = req->base_version();
  args.gradient = *grad;
  absl::StatusOr<Shard::PushResult> r = shard_.Push(args);
  if (!r.ok()) return ToGrpcStatus(r.status());
  const int every = options_.drop_push_reply_every;
  if (every > 0 && (pushes_seen_.fetch_add(1) + 1) % every == 0) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "fault injection: the reply of this accepted push was dropped");
  }
  resp->set_applied(r->applied);
  resp->set_buffered(r->buffered);
  resp->set_duplicate(r->duplicate);
  resp->set_version(r->version);
  resp->set_staleness(r->staleness);
  resp->set_dropped(r->dropped);
  resp->set_late(r->late);
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::GetStatus(grpc::ServerContext* ctx,
                                               const ps::v1::GetStatusRequest*,
                                               ps::v1::GetStatusResponse* resp) {
  PS_AUTHENTICATE_OR_RETURN(ctx);
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
