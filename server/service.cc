#include "server/service.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "common/codec/tensor_bytes.h"
#include "common/codec/tensor_codec.h"
#include "common/transport/grpc_security.h"
#include "common/transport/grpc_status.h"
#include "common/transport/tensor_wire.h"

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
constexpr int kPushPullGradientField = ps::v1::PushPullRequest::kGradientFieldNumber;
constexpr int kPushPullValuesField = ps::v1::PushPullResponse::kValuesFieldNumber;

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

}  // namespace

// Where a pull's values go: the worker's shared region (one copy, under the shard's lock), the
// reply straight from the shard's weights (float32: no copy, the pull holds a loan of them), or
// fresh reply slices (other encodings: the encoding is the copy).
struct PullSink {
  TensorEncoding encoding = TensorEncoding::kF32;
  std::shared_ptr<SharedMemory> memory;  // when set, the values are written at `at`
  char* at = nullptr;
  std::atomic<int64_t>* shared_payloads = nullptr;  // counts the values written at `at`
  std::vector<grpc::Slice> payload;
  absl::Span<const float> lent;  // the values read, sent from the shard's buffer (Lends())
  std::vector<SparseRows> rows;  // asked for: the reply names their tables and keys

  // Whether the reply is sent from the shard's weights (the pull asks for a loan of them).
  bool Lends() const { return memory == nullptr && encoding == TensorEncoding::kF32; }

  void Fill(absl::Span<const float> values) {
    if (memory != nullptr) {
      EncodeDense(encoding, values, at);
      shared_payloads->fetch_add(1);
    } else if (Lends()) {
      lent = values;
    } else {
      payload = EncodeValues(encoding, values);
    }
  }

  // A PullResponse, or with `pushed` (PushPull) a PushPullResponse carrying both answers.
  grpc::ByteBuffer Reply(const Shard::PullResult& r, const ps::v1::PushResponse* pushed) {
    if (!lent.empty())
      payload.push_back(LendSlice(lent.data(), lent.size() * sizeof(float), r.loan));
    ps::v1::PullResponse header;
    header.set_version(r.version);
    header.set_min_clock(r.min_clock);
    header.set_wait_us(absl::ToInt64Microseconds(r.waited));
    header.set_encoding(static_cast<ps::v1::TensorEncoding>(encoding));
    header.set_in_shared_memory(memory != nullptr);
    for (size_t i = 0; i < r.rows.size(); ++i) {
      ps::v1::SparseRows* entry = header.add_rows();
      entry->set_table(rows[i].table);
      *entry->mutable_keys() = {rows[i].keys.begin(), rows[i].keys.end()};
      entry->set_values(reinterpret_cast<const char*>(r.rows[i].data()),
                        r.rows[i].size() * sizeof(float));
    }
    if (pushed == nullptr) return JoinPayloadMessage(header, kPullValuesField, std::move(payload));
    ps::v1::PushPullResponse both;
    *both.mutable_push() = *pushed;
    *both.mutable_pull() = std::move(header);
    return JoinPayloadMessage(both, kPushPullValuesField, std::move(payload));
  }
};

namespace {

// The rows of a request, as the shard takes them: keys only (a pull), or with their gradients.
absl::StatusOr<std::vector<SparseRows>> RowsOf(
    const google::protobuf::RepeatedPtrField<ps::v1::SparseRows>& wire, bool with_values) {
  std::vector<SparseRows> rows;
  rows.reserve(wire.size());
  for (const ps::v1::SparseRows& entry : wire) {
    SparseRows r;
    r.table = entry.table();
    r.keys.assign(entry.keys().begin(), entry.keys().end());
    if (with_values) {
      ASSIGN_OR_RETURN(absl::Span<const float> values, FloatView(entry.values(), "row values"));
      r.values.assign(values.begin(), values.end());
    } else if (!entry.values().empty()) {
      return absl::InvalidArgumentError("a pull's rows carry keys only");
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace

struct ParsedPull {
  Shard::PullArgs args;
  TensorEncoding encoding = TensorEncoding::kF32;
  bool into_shared_memory = false;
  int shared_slot = 0;
};

namespace {

absl::StatusOr<ParsedPull> ParsePull(const ps::v1::PullRequest& req) {
  RETURN_IF_ERROR(CheckRange(req.begin(), req.end()));
  ParsedPull p;
  ASSIGN_OR_RETURN(p.encoding, TensorEncodingFromWire(req.encoding()));
  if (!IsDenseEncoding(p.encoding)) {
    return absl::InvalidArgumentError("weights travel as F32, BF16 or FP16, not TOPK");
  }
  p.args.caller = Caller{req.rank(), req.incarnation(), req.shard_incarnation()};
  p.args.fingerprint = req.layout_fingerprint();
  p.args.range = RangeOf(req.begin(), req.end());
  p.args.clock = req.clock();
  p.args.no_wait = req.no_wait();
  p.into_shared_memory = req.into_shared_memory();
  p.shared_slot = req.shared_slot();
  ASSIGN_OR_RETURN(p.args.rows, RowsOf(req.rows(), /*with_values=*/false));
  return p;
}

absl::StatusOr<ParsedPull> ParsePull(const grpc::ByteBuffer& buffer) {
  ps::v1::PullRequest req;
  RETURN_IF_ERROR(ParseFromByteBuffer(buffer, &req));
  return ParsePull(req);
}

// PushPull's two halves, checked to name one worker and one key range; the pull's unset identity
// fields are the push's. INVALID_ARGUMENT for a gradient inside `push`, another worker, other
// keys or an observer read: the pull is then refused on the same grounds as the push, so once
// the push is applied only its waiting can fail.
absl::Status CheckPushPull(ps::v1::PushPullRequest& req) {
  const ps::v1::PushRequest& push = req.push();
  ps::v1::PullRequest& pull = *req.mutable_pull();
  if (!push.gradient().empty()) {
    return absl::InvalidArgumentError("PushPull carries its gradient in field 3, not in `push`");
  }
  if (pull.no_wait()) {
    return absl::InvalidArgumentError("PushPull's pull is a worker's, not an observer read");
  }
  if (pull.rank() == 0) pull.set_rank(push.rank());
  if (pull.incarnation() == 0) pull.set_incarnation(push.incarnation());
  if (pull.shard_incarnation() == 0) pull.set_shard_incarnation(push.shard_incarnation());
  if (pull.layout_fingerprint() == 0) pull.set_layout_fingerprint(push.layout_fingerprint());
  if (pull.rank() != push.rank() || pull.incarnation() != push.incarnation() ||
      pull.shard_incarnation() != push.shard_incarnation() ||
      pull.layout_fingerprint() != push.layout_fingerprint()) {
    return absl::InvalidArgumentError("PushPull's push and pull name different workers");
  }
  if (pull.begin() != push.begin() || pull.end() != push.end()) {
    return absl::InvalidArgumentError(absl::StrCat("PushPull pulls [", pull.begin(), ", ",
                                                   pull.end(), ") but pushes [", push.begin(), ", ",
                                                   push.end(), "): one call moves one key range"));
  }
  return absl::OkStatus();
}

}  // namespace

// One pull in flight: it finishes from whichever thread settles it in the shard, and cancels
// the shard's waiting entry when its caller goes away.
class ParameterServerService::PullReactor final : public grpc::ServerUnaryReactor {
 public:
  PullReactor(Shard& shard, grpc::ByteBuffer* response) : shard_(shard), response_(response) {}

  // `pushed`: the answer to PushPull's push, sent along with the pull's.
  void Start(const ParsedPull& pull, PullSink sink, absl::Time deadline,
             std::optional<ps::v1::PushResponse> pushed = std::nullopt) {
    sink_ = std::move(sink);
    pushed_ = std::move(pushed);
    const int64_t id = shard_.PullAsync(
        pull.args, deadline, [this](absl::Span<const float> values) { sink_.Fill(values); },
        [this](absl::StatusOr<Shard::PullResult> r) {
          if (r.ok()) *response_ = sink_.Reply(*r, pushed_.has_value() ? &*pushed_ : nullptr);
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
  PullSink sink_;
  std::optional<ps::v1::PushResponse> pushed_;
  absl::Mutex mu_;
  int64_t id_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

grpc::Status ParameterServerService::Authenticate(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) {
  if (options_.token.empty()) return grpc::Status::OK;
  const auto it = metadata.find(kAuthorizationHeader);
  if (it == metadata.end()) return Unauthenticated("the call carries no cluster token");
  const absl::string_view header(it->second.data(), it->second.size());
  if (!absl::StartsWith(header, kBearerPrefix)) {
    return Unauthenticated("the call carries a wrong cluster token");
  }
  return AuthenticateToken(header.substr(std::strlen(kBearerPrefix)));
}

grpc::Status ParameterServerService::AuthenticateToken(absl::string_view token) {
  if (options_.token.empty() || ConstantTimeEquals(token, options_.token)) {
    return grpc::Status::OK;
  }
  return Unauthenticated("the call carries a wrong cluster token");
}

grpc::Status ParameterServerService::Unauthenticated(const char* why) {
  rejected_unauthenticated_.fetch_add(1);
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, why);
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

grpc::ServerUnaryReactor* ParameterServerService::AttachSharedMemory(
    grpc::CallbackServerContext* ctx, const ps::v1::AttachSharedMemoryRequest* req,
    ps::v1::AttachSharedMemoryResponse* resp) {
  return Answer(ctx, Authenticate(ctx->client_metadata()),
                [&] { return HandleAttachSharedMemory(*req, resp); });
}

grpc::ServerUnaryReactor* ParameterServerService::ServePull(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp,
    absl::FunctionRef<absl::Status(ParsedPull*, PullSink*, std::optional<ps::v1::PushResponse>*)>
        prepare) {
  auto* reactor = new PullReactor(shard_, resp);
  grpc::Status auth = Authenticate(ctx->client_metadata());
  if (!auth.ok()) {
    reactor->Finish(auth);
    return reactor;
  }
  ParsedPull pull;
  PullSink sink;
  std::optional<ps::v1::PushResponse> pushed;
  const absl::Status s = prepare(&pull, &sink, &pushed);
  if (!s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  reactor->Start(pull, std::move(sink),
                 std::min(absl::FromChrono(ctx->deadline()), absl::Now() + options_.max_pull_wait),
                 std::move(pushed));
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::Pull(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* req,
                                                       grpc::ByteBuffer* resp) {
  return ServePull(ctx, resp,
                   [&](ParsedPull* pull, PullSink* sink, std::optional<ps::v1::PushResponse>*) {
                     ASSIGN_OR_RETURN(*pull, ParsePull(*req));
                     ASSIGN_OR_RETURN(*sink, SinkFor(&*pull));
                     return absl::OkStatus();
                   });
}

grpc::ServerUnaryReactor* ParameterServerService::PushPull(grpc::CallbackServerContext* ctx,
                                                           const grpc::ByteBuffer* req,
                                                           grpc::ByteBuffer* resp) {
  return ServePull(ctx, resp,
                   [&](ParsedPull* pull, PullSink* sink,
                       std::optional<ps::v1::PushResponse>* pushed) -> absl::Status {
                     pushed->emplace();
                     return PushThenPreparePull(*req, pull, sink, &**pushed);
                   });
}

grpc::Status ParameterServerService::HandleInit(const ps::v1::InitRequest& req,
                                                ps::v1::InitResponse* resp) {
  absl::Status s = CheckRange(req.begin(), req.end());
  if (!s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<absl::Span<const float>> values = FloatView(req.values(), "values");
  if (!values.ok()) return ToGrpcStatus(values.status());
  std::vector<SparseTableSpec> tables;
  for (const ps::v1::SparseTable& t : req.tables()) {
    tables.push_back(SparseTableSpec{t.name(), t.dim(), t.init_scale()});
  }
  absl::StatusOr<Shard::InitResult> r =
      shard_.Init(req.layout_fingerprint(), req.total_params(), RangeOf(req.begin(), req.end()),
                  *values, tables);
  if (!r.ok()) return ToGrpcStatus(r.status());
  resp->set_already_initialized(r->already_initialized);
  resp->set_version(r->version);
  if (options_.on_initialized) options_.on_initialized();
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::HandlePull(const grpc::ByteBuffer& req, absl::Time deadline,
                                                grpc::ByteBuffer* resp) {
  absl::StatusOr<ParsedPull> pull = ParsePull(req);
  absl::StatusOr<PullSink> sink = pull.ok() ? SinkFor(&*pull) : pull.status();
  if (!sink.ok()) return ToGrpcStatus(sink.status());
  absl::StatusOr<Shard::PullResult> r =
      shard_.Pull(pull->args, std::min(deadline, absl::Now() + options_.max_pull_wait),
                  [&](absl::Span<const float> values) { sink->Fill(values); });
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = sink->Reply(*r, nullptr);
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::HandlePushPull(const grpc::ByteBuffer& req,
                                                    absl::Time deadline, grpc::ByteBuffer* resp) {
  ParsedPull pull;
  PullSink sink;
  ps::v1::PushResponse pushed;
  const absl::Status s = PushThenPreparePull(req, &pull, &sink, &pushed);
  if (!s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<Shard::PullResult> r =
      shard_.Pull(pull.args, std::min(deadline, absl::Now() + options_.max_pull_wait),
                  [&](absl::Span<const float> values) { sink.Fill(values); });
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = sink.Reply(*r, &pushed);
  return grpc::Status::OK;
}

int64_t ParameterServerService::StartPull(
    const grpc::ByteBuffer& req, bool push_pull, absl::Time deadline,
    std::function<void(grpc::Status, grpc::ByteBuffer)> done) {
  struct Pending {
    PullSink sink;
    std::optional<ps::v1::PushResponse> pushed;
    std::function<void(grpc::Status, grpc::ByteBuffer)> done;
  };
  auto pending = std::make_shared<Pending>();
  pending->done = std::move(done);
  ParsedPull pull;
  absl::Status prepared;
  if (push_pull) {
    pending->pushed.emplace();
    prepared = PushThenPreparePull(req, &pull, &pending->sink, &*pending->pushed);
  } else {
    absl::StatusOr<ParsedPull> parsed = ParsePull(req);
    absl::StatusOr<PullSink> sink = parsed.ok() ? SinkFor(&*parsed) : parsed.status();
    prepared = sink.status();
    if (prepared.ok()) {
      pull = *std::move(parsed);
      pending->sink = *std::move(sink);
    }
  }
  if (!prepared.ok()) {
    pending->done(ToGrpcStatus(prepared), grpc::ByteBuffer());
    return 0;
  }
  return shard_.PullAsync(
      pull.args, std::min(deadline, absl::Now() + options_.max_pull_wait),
      [pending](absl::Span<const float> values) { pending->sink.Fill(values); },
      [pending](absl::StatusOr<Shard::PullResult> r) {
        if (!r.ok()) {
          pending->done(ToGrpcStatus(r.status()), grpc::ByteBuffer());
          return;
        }
        grpc::ByteBuffer reply =
            pending->sink.Reply(*r, pending->pushed.has_value() ? &*pending->pushed : nullptr);
        pending->done(grpc::Status::OK, std::move(reply));
      });
}

absl::Status ParameterServerService::PushThenPreparePull(const grpc::ByteBuffer& req,
                                                         ParsedPull* pull, PullSink* sink,
                                                         ps::v1::PushResponse* pushed) {
  ps::v1::PushPullRequest header;
  SplitMessage split;  // holds gRPC's buffers: the gradient is read in place
  RETURN_IF_ERROR(SplitPayloadMessage(req, kPushPullGradientField, &header, &split));
  RETURN_IF_ERROR(CheckPushPull(header));
  // The pull is checked before the push, so that a pull that could not be answered (malformed,
  // or outside the worker's region) changes nothing.
  ASSIGN_OR_RETURN(*pull, ParsePull(header.pull()));
  ASSIGN_OR_RETURN(*sink, SinkFor(&*pull));
  ASSIGN_OR_RETURN(*pushed, ApplyPush(header.push(), split));
  return absl::OkStatus();
}

grpc::Status ParameterServerService::HandlePush(const grpc::ByteBuffer& req,
                                                grpc::ByteBuffer* resp) {
  ps::v1::PushRequest header;
  SplitMessage split;  // holds gRPC's buffers: the gradient is read in place
  absl::Status s = SplitPayloadMessage(req, kPushGradientField, &header, &split);
  if (!s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<ps::v1::PushResponse> out = ApplyPush(header, split);
  if (!out.ok()) return ToGrpcStatus(out.status());
  *resp = SerializeToByteBuffer(*out);
  return grpc::Status::OK;
}

absl::StatusOr<ps::v1::PushResponse> ParameterServerService::ApplyPush(
    const ps::v1::PushRequest& header, SplitMessage& split) {
  RETURN_IF_ERROR(CheckRange(header.begin(), header.end()));
  ASSIGN_OR_RETURN(const TensorEncoding encoding, TensorEncodingFromWire(header.encoding()));
  // A gradient in the worker's shared region is read in place, like gRPC's buffers.
  absl::StatusOr<WorkerRegions::Region> shared;
  if (header.shared_bytes() != 0) {
    shared = regions_.Of(header.rank(), header.incarnation());
    RETURN_IF_ERROR(shared.status());
    const int64_t n = header.end() - header.begin();
    if (!split.payload.empty() || header.shared_bytes() < 0 || header.shared_bytes() > 4 * n ||
        !shared->layout.Holds(header.shared_slot(), header.begin(), header.end())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a shared gradient of ", header.shared_bytes(), " bytes for [", header.begin(), ", ",
          header.end(), ") in slot ", header.shared_slot(), " does not fit the worker's region of ",
          shared->layout.slots, " x ", shared->layout.total_params, " elements (or the message ",
          "carries a payload too)"));
    }
    split.payload.assign(
        1, absl::Span<const char>(
               shared->At(header.shared_slot(), RegionArea::kGradient, header.begin()),
               header.shared_bytes()));
    shared_payloads_.fetch_add(1);
  }
  ASSIGN_OR_RETURN(
      EncodedTensor gradient,
      EncodedTensor::FromChunks(encoding, header.end() - header.begin(), split.payload));
  Shard::PushArgs args;
  args.caller = Caller{header.rank(), header.incarnation(), header.shard_incarnation()};
  args.fingerprint = header.layout_fingerprint();
  args.range = RangeOf(header.begin(), header.end());
  args.clock = header.clock();
  args.base_version = header.base_version();
  args.gradient = std::move(gradient);
  ASSIGN_OR_RETURN(args.rows, RowsOf(header.rows(), /*with_values=*/true));
  ASSIGN_OR_RETURN(const Shard::PushResult r, shard_.Push(args));
  const int every = options_.drop_push_reply_every;
  if (every > 0 && (pushes_seen_.fetch_add(1) + 1) % every == 0) {
    return absl::UnavailableError("fault injection: the reply of this accepted push was dropped");
  }
  ps::v1::PushResponse out;
  out.set_applied(r.applied);
  out.set_buffered(r.buffered);
  out.set_duplicate(r.duplicate);
  out.set_version(r.version);
  out.set_staleness(r.staleness);
  out.set_dropped(r.dropped);
  out.set_late(r.late);
  out.set_staged(r.staged);
  return out;
}

int ParameterServerService::shared_memory_workers() const { return regions_.size(); }

absl::StatusOr<PullSink> ParameterServerService::SinkFor(ParsedPull* pull_to_read) {
  const ParsedPull& pull = *pull_to_read;
  PullSink sink;
  sink.encoding = pull.encoding;
  sink.rows = pull.args.rows;
  if (!pull.into_shared_memory) {
    pull_to_read->args.lend = sink.Lends();
    return sink;
  }
  ASSIGN_OR_RETURN(WorkerRegions::Region shared,
                   regions_.Of(pull.args.caller.rank, pull.args.caller.incarnation));
  if (!shared.layout.Holds(pull.shared_slot, pull.args.range.begin, pull.args.range.end)) {
    return absl::InvalidArgumentError(
        absl::StrCat("range [", pull.args.range.begin, ", ", pull.args.range.end, ") in slot ",
                     pull.shared_slot, " is outside the worker's region of ", shared.layout.slots,
                     " x ", shared.layout.total_params, " elements"));
  }
  sink.at = shared.At(pull.shared_slot, RegionArea::kWeights, pull.args.range.begin);
  sink.shared_payloads = &shared_payloads_;
  sink.memory = std::move(shared.memory);
  return sink;
}

}  // namespace ps
