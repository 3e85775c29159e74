#include "worker/grpc_parameter_client.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <random>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/transport/grpc_status.h"
#include "common/transport/local_frames.h"
#include "common/transport/tensor_wire.h"
#include "spdlog/spdlog.h"

namespace ps {

absl::Status ValidateGrpcClientOptions(const GrpcClientOptions& options) {
  if (options.retry_for < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("retry_for must be >= 0");
  }
  if (!IsDenseEncoding(options.pull_encoding)) {
    return absl::InvalidArgumentError("weights are pulled as f32, bf16 or fp16, not top-k");
  }
  if (options.chunk_bytes < 0 || options.connections < 1) {
    return absl::InvalidArgumentError("chunk_bytes must be >= 0 and connections >= 1");
  }
  if (options.shared_memory_slots < 1 ||
      options.shared_memory_slots > SharedRegionLayout::kMaxSlots) {
    return absl::InvalidArgumentError(absl::StrCat("shared_memory_slots must be in [1, ",
                                                   SharedRegionLayout::kMaxSlots, "], not ",
                                                   options.shared_memory_slots));
  }
  if (!(options.topk_ratio > 0.0 && options.topk_ratio <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("topk_ratio must be in (0, 1], not ", options.topk_ratio));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GrpcParameterClient>> GrpcParameterClient::Create(
    const GrpcClientOptions& options) {
  if (options.servers.empty()) return absl::InvalidArgumentError("no servers given");
  for (const std::string& s : options.servers) {
    if (s.empty() || s.find(':') == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("server '", s, "' is not host:port"));
    }
  }
  RETURN_IF_ERROR(ValidateGrpcClientOptions(options));
  return std::unique_ptr<GrpcParameterClient>(new GrpcParameterClient(options));
}

GrpcParameterClient::GrpcParameterClient(const GrpcClientOptions& options)
    : options_(options),
      fanout_(FanoutOptions{options.servers, options.retry_for, options.initial_backoff,
                            options.report_unreachable_every}) {
  if (options_.incarnation == 0) {
    std::random_device rd;
    while (options_.incarnation == 0) options_.incarnation = (uint64_t{rd()} << 32) ^ rd();
  }
  if (options_.security.credentials == nullptr) {
    options_.security.credentials = grpc::InsecureChannelCredentials();
  }
  const grpc::ChannelArguments args =
      ClientChannelArguments(options.max_message_bytes, options_.security);
  for (const std::string& server : options.servers) {
    // Each channel has its own connection: the client's channel arguments give every channel a
    // local subchannel pool.
    auto channel = grpc::CreateCustomChannel(server, options_.security.credentials, args);
    stubs_.push_back(ps::v1::ParameterServer::NewStub(channel));
    raw_stubs_.emplace_back();
    raw_stubs_.back().push_back(std::make_unique<grpc::GenericStub>(channel));
    // A lone shard gets a second connection for split transfers (split_lone_pulls,
    // split_lone_pushes); channels connect at their first call, so an unused one costs nothing.
    const int connections =
        LoneTransfersMaySplit(Transfer::kPull) || LoneTransfersMaySplit(Transfer::kPush)
            ? std::max(options_.connections, 2)
            : options_.connections;
    for (int c = 1; c < connections; ++c) {
      raw_stubs_.back().push_back(std::make_unique<grpc::GenericStub>(
          grpc::CreateCustomChannel(server, options_.security.credentials, args)));
    }
  }
  shard_incarnations_.assign(stubs_.size(), 0);
  encoded_.resize(stubs_.size());
  if (options_.push_encoding == TensorEncoding::kTopK) {
    topk_ = std::make_unique<TopKCompressor>(options_.total_params, options_.topk_ratio);
  }
}

void GrpcParameterClient::Prepare(grpc::ClientContext* ctx, absl::Duration timeout,
                                  bool wait_for_ready) const {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  ctx->set_wait_for_ready(wait_for_ready);
  if (!options_.security.token.empty()) {
    ctx->AddMetadata(kAuthorizationHeader, kBearerPrefix + options_.security.token);
  }
}

std::vector<uint64_t> GrpcParameterClient::shard_incarnations() const {
  absl::MutexLock lock(&mu_);
  return shard_incarnations_;
}

KeyRange GrpcParameterClient::range(int shard) const {
  return ShardRange(options_.total_params, static_cast<int>(stubs_.size()), shard);
}

template <typename Request>
std::vector<Request> GrpcParameterClient::RequestsPerShard() const {
  std::vector<Request> requests(stubs_.size());
  for (size_t s = 0; s < stubs_.size(); ++s) {
    const KeyRange r = range(static_cast<int>(s));
    requests[s].set_layout_fingerprint(options_.fingerprint);
    requests[s].set_begin(r.begin);
    requests[s].set_end(r.end);
  }
  return requests;
}

template <typename Request, typename Response>
absl::Status GrpcParameterClient::CallAll(const char* method, StartFn<Request, Response> start,
                                          const std::vector<Request>& requests,
                                          std::vector<Response>* responses, absl::Duration timeout,
                                          bool wait_for_ready, bool retry,
                                          std::vector<absl::Status>* each_status) {
  return CallEach(
      method, EveryShard(),
      [&](size_t s, grpc::ClientContext* ctx, grpc::CompletionQueue* cq) {
        return (stubs_[s].get()->*start)(ctx, requests[s], cq);
      },
      responses, timeout, wait_for_ready, nullptr, retry, each_status);
}

absl::Status GrpcParameterClient::CallRaw(
    const char* method, RawMethod raw, const std::vector<Piece>& pieces,
    const std::vector<grpc::ByteBuffer>& requests, std::vector<grpc::ByteBuffer>* responses,
    absl::Duration timeout, const std::function<void(size_t)>& on_ok, std::vector<int>* sends) {
  responses->assign(pieces.size(), grpc::ByteBuffer());
  std::vector<char> answered(pieces.size(), 0);
  std::vector<int> local_sends(pieces.size(), 0);
  if (sends != nullptr) sends->assign(pieces.size(), 0);
  if (std::optional<absl::Status> local = CallLocal(method, raw, pieces, requests, responses,
                                                    timeout, on_ok, &answered, &local_sends)) {
    if (sends != nullptr) *sends = std::move(local_sends);
    return *local;
  }
  // Over gRPC: the pieces the local channels did not answer, each answer put where the caller
  // looks for piece i's before on_ok(i) runs.
  std::vector<size_t> rest;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (!answered[i]) rest.push_back(i);
  }
  std::vector<int> shards(rest.size());
  for (size_t j = 0; j < rest.size(); ++j) shards[j] = pieces[rest[j]].shard;
  std::vector<grpc::ByteBuffer> answers;
  std::vector<int> attempts;
  const absl::Status status = CallEach(
      method, shards,
      [&](size_t j, grpc::ClientContext* ctx, grpc::CompletionQueue* cq) {
        const Piece& piece = pieces[rest[j]];
        return raw_stubs_[piece.shard][piece.connection]->PrepareUnaryCall(ctx, raw.path,
                                                                           requests[rest[j]], cq);
      },
      &answers, timeout, /*wait_for_ready=*/false,
      [&](size_t j) {
        (*responses)[rest[j]] = std::move(answers[j]);
        if (on_ok) on_ok(rest[j]);
      },
      /*retry=*/true, /*each_status=*/nullptr, LoneShardWindow(), &attempts);
  if (sends != nullptr && attempts.size() == rest.size()) {
    for (size_t j = 0; j < rest.size(); ++j) (*sends)[rest[j]] = local_sends[rest[j]] + attempts[j];
  }
  return status;
}

size_t GrpcParameterClient::LoneShardWindow() const {
  // The pieces of a transfer with a worker's only shard (split_lone_pulls/pushes, --chunk_mib):
  // two in flight per connection, so each piece finishes while the next one is on the wire and
  // the shard's work on it (check, copy, update) overlaps the transfer, where all of them at
  // once would share the connection and finish together. Across a veth pair, 16 MiB BSP pushes
  // 1.55-1.61 -> 1.74-1.87 GB/s and pulls 1.45-1.65 -> 1.71-1.82 (docs/performance.md). With
  // several shards every call is in flight at once: a pull held by one shard may wait for this
  // worker's call to another.
  if (raw_stubs_.size() != 1) return 0;
  return 2 * raw_stubs_[0].size();
}

std::optional<absl::Status> GrpcParameterClient::CallLocal(
    const char* method, RawMethod raw, const std::vector<Piece>& pieces,
    const std::vector<grpc::ByteBuffer>& requests, std::vector<grpc::ByteBuffer>* responses,
    absl::Duration timeout, const std::function<void(size_t)>& on_ok, std::vector<char>* answered,
    std::vector<int>* sends) {
  LocalFrameHeader header;
  const absl::string_view path = raw.path;
  if (path == "/ps.v1.ParameterServer/Push") {
    header.method_or_code = static_cast<uint32_t>(LocalMethod::kPush);
  } else if (path == "/ps.v1.ParameterServer/Pull") {
    header.method_or_code = static_cast<uint32_t>(LocalMethod::kPull);
  } else if (path == "/ps.v1.ParameterServer/PushPull") {
    header.method_or_code = static_cast<uint32_t>(LocalMethod::kPushPull);
  } else {
    return std::nullopt;
  }
  header.timeout_ms =
      timeout == absl::InfiniteDuration()
          ? 0
          : static_cast<uint32_t>(std::clamp<int64_t>(absl::ToInt64Milliseconds(timeout), 1,
                                                      std::numeric_limits<uint32_t>::max()));
  std::vector<std::shared_ptr<LocalChannel>> channels(pieces.size());
  {
    absl::MutexLock lock(&local_mu_);
    if (local_.empty()) return std::nullopt;
    for (size_t i = 0; i < pieces.size(); ++i) channels[i] = local_[pieces[i].shard];
  }
  size_t held = 0;  // channels [0, held) are this call's
  while (held < channels.size() && channels[held] != nullptr && channels[held]->TryAcquire()) {
    ++held;
  }
  const auto release = absl::MakeCleanup([&] {
    for (size_t i = 0; i < held; ++i) channels[i]->Release();
  });
  if (held < channels.size() || fanout_.cancelled()) return std::nullopt;
  // Gives up the calls still waiting: their shards see the connections go and cancel them.
  const auto abandon = [&] {
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (!(*answered)[i]) DropLocal(pieces[i].shard, channels[i]);
    }
  };
  const auto shard_name = [&](size_t i) {
    const int shard = pieces[i].shard;
    return absl::StrCat(method, " to shard ", shard, " (", options_.servers[shard], ")");
  };
  for (size_t i = 0; i < pieces.size(); ++i) {
    // Counted before it is known to be whole: a frame cut short is not read as a request, but
    // one the shard read before the channel broke is.
    ++(*sends)[i];
    if (!WriteLocalFrame(channels[i]->fd(), header, requests[i]).ok()) {
      abandon();
      return std::nullopt;
    }
  }
  std::vector<pollfd> watched(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) watched[i] = pollfd{channels[i]->fd(), POLLIN, 0};
  const absl::Time deadline = absl::Now() + timeout;
  size_t waiting = pieces.size();
  while (waiting > 0) {
    const absl::Duration left = deadline - absl::Now();
    const int wait_ms =
        left == absl::InfiniteDuration()
            ? -1
            : static_cast<int>(std::clamp<int64_t>(
                  absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))), 0,
                  std::numeric_limits<int>::max()));
    const int ready = poll(watched.data(), watched.size(), wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      abandon();
      if (ready < 0) return std::nullopt;
      for (size_t i = 0; i < pieces.size(); ++i) {
        if (!(*answered)[i]) {
          return absl::DeadlineExceededError(absl::StrCat(shard_name(i), ": Deadline Exceeded"));
        }
      }
    }
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (watched[i].fd < 0 || watched[i].revents == 0) continue;
      watched[i].fd = -1;  // answered or broken: poll skips it from now on
      LocalFrameHeader reply;
      grpc::ByteBuffer body;
      const absl::Status read = channels[i]->interrupted()
                                    ? absl::CancelledError("interrupted")
                                    : ReadLocalFrame(channels[i]->fd(), &reply, &body);
      if (!read.ok()) {
        abandon();
        if (fanout_.cancelled())
          return absl::CancelledError(absl::StrCat(method, ": client cancelled"));
        return std::nullopt;
      }
      const auto code = static_cast<grpc::StatusCode>(reply.method_or_code);
      if (code == grpc::StatusCode::OK) {
        (*responses)[i] = std::move(body);
        (*answered)[i] = 1;
        --waiting;
        if (on_ok) on_ok(i);
        continue;
      }
      const std::string message = LocalFrameText(body);
      abandon();
      // A shard shutting down (its waiting pulls fail UNAVAILABLE): gRPC's retries find the
      // next one.
      if (code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::CANCELLED) {
        return std::nullopt;
      }
      return FromGrpcStatus(grpc::Status(code, message), shard_name(i));
    }
  }
  return absl::OkStatus();
}

void GrpcParameterClient::DropLocal(int shard, const std::shared_ptr<LocalChannel>& channel) {
  channel->Interrupt();
  absl::MutexLock lock(&local_mu_);
  if (local_[shard] == channel) local_[shard] = nullptr;
}

std::vector<int> GrpcParameterClient::EveryShard() const {
  std::vector<int> shards(stubs_.size());
  for (size_t s = 0; s < shards.size(); ++s) shards[s] = static_cast<int>(s);
  return shards;
}

template <typename Response, typename Start>
absl::Status GrpcParameterClient::CallEach(const char* method, const std::vector<int>& shards,
                                           Start start, std::vector<Response>* responses,
                                           absl::Duration timeout, bool wait_for_ready,
                                           const std::function<void(size_t)>& on_ok, bool retry,
                                           std::vector<absl::Status>* each_status,
                                           size_t max_in_flight, std::vector<int>* attempts) {
  responses->assign(shards.size(), Response());
  // A retry replaces call i's reader once its previous attempt has finished.
  std::vector<std::unique_ptr<grpc::ClientAsyncResponseReader<Response>>> readers(shards.size());
  ShardFanout::Calls calls;
  calls.method = method;
  calls.shards = shards;
  calls.launch = [&](size_t i, grpc::ClientContext* ctx, grpc::CompletionQueue* cq,
                     grpc::Status* status, void* tag) {
    readers[i] = start(i, ctx, cq);
    readers[i]->StartCall();
    readers[i]->Finish(&(*responses)[i], status, tag);
  };
  calls.prepare = [&](grpc::ClientContext* ctx) { Prepare(ctx, timeout, wait_for_ready); };
  calls.retry = retry;
  calls.on_ok = on_ok;
  calls.each_status = each_status;
  calls.max_in_flight = max_in_flight;
  calls.attempts = attempts;
  return fanout_.Run(calls);
}

absl::StatusOr<ClusterInfo> GrpcParameterClient::Register(int rank, absl::Duration timeout) {
  options_.rank = rank;
  std::vector<ps::v1::RegisterRequest> requests(stubs_.size());
  for (auto& r : requests) {
    r.set_rank(rank);
    r.set_layout_fingerprint(options_.fingerprint);
    r.set_incarnation(options_.incarnation);
    FillPlan(r.mutable_plan());
  }
  std::vector<ps::v1::RegisterResponse> responses;
  RETURN_IF_ERROR(CallAll("Register", &Stub::PrepareAsyncRegister, requests, &responses, timeout,
                          /*wait_for_ready=*/true));
  ClusterInfo info;
  info.num_shards = static_cast<int>(stubs_.size());
  info.num_workers = responses[0].num_workers();
  ASSIGN_OR_RETURN(info.mode, ParseConsistencyMode(responses[0].mode()));
  info.staleness = responses[0].staleness();
  info.resume_clock = responses[0].clock();
  info.initialized = true;
  info.lease = absl::Milliseconds(responses[0].lease_ms());
  for (size_t s = 0; s < responses.size(); ++s) {
    const auto& r = responses[s];
    if (r.shard_id() != static_cast<int>(s) || r.num_shards() != info.num_shards ||
        r.num_workers() != info.num_workers || r.mode() != ConsistencyModeName(info.mode) ||
        r.staleness() != info.staleness) {
      return absl::FailedPreconditionError(
          absl::StrCat(options_.servers[s], " is shard ", r.shard_id(), " of ", r.num_shards(),
                       " (", r.mode(), ", ", r.num_workers(), " workers) but is listed as shard ",
                       s, " of ", info.num_shards, " (", ConsistencyModeName(info.mode), ", ",
                       info.num_workers, " workers): check --servers and the flags"));
    }
    info.resume_clock = std::min(info.resume_clock, r.clock());
    info.initialized = info.initialized && r.initialized();
    info.job_finished = info.job_finished || r.job_finished();
    info.lease = std::min(info.lease, absl::Milliseconds(r.lease_ms()));
  }
  if (rank >= info.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " but the servers expect ", info.num_workers, " workers"));
  }
  std::vector<uint64_t> shard_incarnation(responses.size());
  for (size_t s = 0; s < responses.size(); ++s) {
    shard_incarnation[s] = responses[s].shard_incarnation();
  }
  bsp_.store(info.mode == ConsistencyMode::kBsp);
  {
    absl::MutexLock lock(&mu_);
    shard_incarnations_ = shard_incarnation;
    lease_ = info.lease;
  }
  if (options_.shared_memory) AttachSharedMemory(shard_incarnation);
  return info;
}

void GrpcParameterClient::AttachSharedMemory(const std::vector<uint64_t>& shard_incarnation) {
  if (region_ == nullptr) {
    absl::StatusOr<std::unique_ptr<SharedRegion>> region = SharedRegion::Create(
        SharedRegionLayout{options_.total_params, options_.shared_memory_slots},
        static_cast<int>(stubs_.size()));
    if (!region.ok()) {
      spdlog::warn("no shared memory, payloads go over gRPC: {}", region.status().ToString());
      options_.shared_memory = false;
      return;
    }
    region_ = std::move(*region);
  }
  std::vector<char> attached(stubs_.size(), 0);
  for (size_t s = 0; s < stubs_.size(); ++s) {
    ps::v1::AttachSharedMemoryRequest req;
    req.set_rank(options_.rank);
    req.set_incarnation(options_.incarnation);
    req.set_shard_incarnation(shard_incarnation[s]);
    req.set_pid(region_->memory().pid());
    req.set_fd(region_->memory().fd());
    req.set_nonce(region_->memory().nonce());
    req.set_total_params(options_.total_params);
    req.set_slots(options_.shared_memory_slots);
    ps::v1::AttachSharedMemoryResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx, options_.call_timeout, /*wait_for_ready=*/false);
    const grpc::Status st = stubs_[s]->AttachSharedMemory(&ctx, req, &resp);
    attached[s] = st.ok();
    ConnectLocal(s, st.ok() && options_.local_calls ? resp.local_socket() : std::string());
    if (st.ok()) {
      spdlog::debug("shard {}: payloads through shared memory", s);
    } else {
      spdlog::info("shard {} ({}): payloads over gRPC, no shared memory: {}", s,
                   options_.servers[s], st.error_message());
    }
  }
  region_->SetAttached(std::move(attached));
}

void GrpcParameterClient::ConnectLocal(size_t shard, const std::string& name) {
  absl::StatusOr<std::shared_ptr<LocalChannel>> channel =
      name.empty() ? absl::NotFoundError("no local socket")
                   : LocalChannel::Connect(name, options_.security.token, options_.call_timeout);
  if (!channel.ok() && !name.empty()) {
    spdlog::info("shard {} ({}): calls over gRPC, not its local socket: {}", shard,
                 options_.servers[shard], channel.status().ToString());
  }
  absl::MutexLock lock(&local_mu_);
  local_.resize(stubs_.size());
  local_[shard] = channel.ok() ? *std::move(channel) : nullptr;
}

int GrpcParameterClient::shared_memory_shards() const {
  return region_ == nullptr ? 0 : region_->attached_shards();
}

TransportBuffers GrpcParameterClient::TakeTransportBuffers(int set) {
  if (region_ == nullptr) return TransportBuffers{};
  return region_->Take(set, options_.pull_encoding == TensorEncoding::kF32,
                       options_.push_encoding == TensorEncoding::kF32);
}

void GrpcParameterClient::SetWorkPlan(int64_t steps, int64_t samples_per_step) {
  absl::MutexLock lock(&mu_);
  planned_steps_ = steps;
  samples_per_step_ = samples_per_step;
}

void GrpcParameterClient::FillPlan(ps::v1::WorkPlan* plan) const {
  absl::MutexLock lock(&mu_);
  plan->set_steps(planned_steps_);
  plan->set_samples_per_step(samples_per_step_);
}

absl::Status GrpcParameterClient::Heartbeat() { return Beat(/*leaving=*/false); }

absl::Status GrpcParameterClient::Leave() { return Beat(/*leaving=*/true); }

absl::Status GrpcParameterClient::Beat(bool leaving) {
  std::vector<ps::v1::HeartbeatRequest> requests(stubs_.size());
  const std::vector<uint64_t> shard_incarnation = shard_incarnations();
  for (size_t s = 0; s < requests.size(); ++s) {
    requests[s].set_rank(options_.rank);
    requests[s].set_incarnation(options_.incarnation);
    requests[s].set_shard_incarnation(shard_incarnation[s]);
    FillPlan(requests[s].mutable_plan());
    requests[s].set_leaving(leaving);
  }
  // A beat is due every lease/3: a shard that does not answer within that is skipped until the
  // next beat, so each shard's lease depends on that shard alone.
  absl::Duration timeout;
  {
    absl::MutexLock lock(&mu_);
    timeout = std::clamp(lease_ / 3, absl::Milliseconds(10), options_.call_timeout);
  }
  std::vector<ps::v1::HeartbeatResponse> responses;
  std::vector<absl::Status> each_status;
  absl::Status result = CallAll("Heartbeat", &Stub::PrepareAsyncHeartbeat, requests, &responses,
                                timeout, /*wait_for_ready=*/false, /*retry=*/false, &each_status);
  for (size_t s = 0; s < each_status.size(); ++s) {
    // The shard restarted, expired this worker or gave its rank to another process: calls in
    // flight to it (a pull waiting for a round, say) wait for something that will not come.
    // Started again, they reach the shard as it is now, and its ABORTED makes the trainer
    // register again.
    if (absl::IsAborted(each_status[s])) CancelCallsTo(static_cast<int>(s));
  }
  return result;
}

void GrpcParameterClient::CancelCallsTo(int shard) {
  int cancelled = fanout_.CancelCallsTo(shard);
  {
    // A call waiting on the shard's local channel goes on over gRPC.
    absl::MutexLock lock(&local_mu_);
    if (!local_.empty() && local_[shard] != nullptr && !local_[shard]->TryAcquire()) {
      local_[shard]->Interrupt();
      local_[shard] = nullptr;
      ++cancelled;
    } else if (!local_.empty() && local_[shard] != nullptr) {
      local_[shard]->Release();
    }
  }
  if (cancelled > 0) {
    spdlog::info(
        "shard {} ({}) restarted or dropped this worker: {} calls in flight to it start "
        "again",
        shard, options_.servers[shard], cancelled);
  }
}

absl::Status GrpcParameterClient::Init(absl::Span<const float> params) {
  if (static_cast<int64_t>(params.size()) != options_.total_params) {
    return absl::InvalidArgumentError("Init: buffer size differs from the layout");
  }
  auto requests = RequestsPerShard<ps::v1::InitRequest>();
  for (size_t s = 0; s < stubs_.size(); ++s) {
    const KeyRange r = range(static_cast<int>(s));
    requests[s].set_total_params(options_.total_params);
    requests[s].set_values(params.data() + r.begin, r.size() * sizeof(float));
    for (const SparseTableSpec& t : options_.tables) {
      ps::v1::SparseTable* table = requests[s].add_tables();
      table->set_name(t.name);
      table->set_dim(t.dim);
      table->set_init_scale(t.init_scale);
    }
  }
  std::vector<ps::v1::InitResponse> responses;
  return CallAll("Init", &Stub::PrepareAsyncInit, requests, &responses, options_.call_timeout,
                 false);
}

absl::StatusOr<ShardReport> ShardReportFromResponse(const ps::v1::GetStatusResponse& r) {
  ShardReport rep;
  rep.shard_id = r.shard_id();
  ASSIGN_OR_RETURN(rep.mode, ParseConsistencyMode(r.mode()));
  rep.staleness_bound = r.staleness();
  rep.initialized = r.initialized();
  rep.range = KeyRange{r.begin(), r.end()};
  rep.version = r.version();
  rep.min_clock = r.min_clock();
  rep.rejected_nonfinite = r.rejected_nonfinite();
  rep.update_rule = r.update_rule();
  rep.backup_workers = r.backup_workers();
  rep.incarnation = r.shard_incarnation();
  rep.restored_version = r.restored_version();
  rep.checkpoint_version = r.checkpoint_version();
  rep.pushes_accepted = r.pushes_accepted();
  rep.pushes_duplicate = r.pushes_duplicate();
  rep.pieces_received = r.pieces_received();
  rep.shared_memory_workers = r.shared_memory_workers();
  rep.shared_memory_payloads = r.shared_memory_payloads();
  rep.local_calls = r.local_calls();
  rep.rejected_unauthenticated = r.rejected_unauthenticated();
  rep.finished_at_restore = r.finished_at_restore();
  rep.decay_updates = r.decay_updates();
  rep.finished_job_rerun = r.finished_job_rerun();
  for (const auto& t : r.tables()) {
    SparseTableStatus table{t.name(), t.rows(), t.bytes(), t.capacity(), {}};
    table.counters = {t.admissions(), t.evictions(), t.not_admitted()};
    rep.tables.push_back(std::move(table));
  }
  rep.sparse_timing = {r.sparse_pulls(), r.sparse_pull_seconds(), r.sparse_pushes(),
                       r.sparse_push_seconds()};
  for (const auto& w : r.workers()) {
    ShardReport::Worker out;
    out.rank = w.rank();
    out.clock = w.clock();
    out.state = w.state();
    out.applied = w.applied();
    out.max_staleness = w.max_staleness();
    out.mean_staleness = w.mean_staleness();
    out.staleness_counts.assign(w.staleness_counts().begin(), w.staleness_counts().end());
    out.dropped = w.dropped();
    out.late = w.late();
    out.planned_steps = w.planned_steps();
    out.samples_per_step = w.samples_per_step();
    out.skipped_steps = w.skipped_steps();
    rep.workers.push_back(std::move(out));
  }
  return rep;
}

absl::StatusOr<std::vector<ShardReport>> GrpcParameterClient::Status() {
  std::vector<ps::v1::GetStatusRequest> requests(stubs_.size());
  std::vector<ps::v1::GetStatusResponse> responses;
  RETURN_IF_ERROR(CallAll("GetStatus", &Stub::PrepareAsyncGetStatus, requests, &responses,
                          options_.call_timeout, false));
  std::vector<ShardReport> reports;
  for (const auto& r : responses) {
    ASSIGN_OR_RETURN(ShardReport report, ShardReportFromResponse(r));
    reports.push_back(std::move(report));
  }
  return reports;
}

void GrpcParameterClient::Cancel() {
  fanout_.Cancel();
  absl::MutexLock lock(&local_mu_);
  for (const std::shared_ptr<LocalChannel>& channel : local_) {
    if (channel != nullptr) channel->Interrupt();
  }
}

}  // namespace ps
