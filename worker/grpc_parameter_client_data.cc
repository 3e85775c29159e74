// GrpcParameterClient's data path: pulls, pushes and PushPull, cut into pieces (piece_plan.h),
// their payloads in the messages or in the shared region (shared_region.h). The control calls
// (Register, heartbeats, Init, status) and the fan-out are in grpc_parameter_client.cc.

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/transport/tensor_wire.h"
#include "worker/grpc_parameter_client.h"
#include "worker/sparse_routing.h"

namespace ps {

bool GrpcParameterClient::SplitsLoneTransfer(Transfer transfer, int64_t bytes) const {
  // Only under BSP. Pulls: every piece then reads the same version (the round cannot close
  // before this worker pushes again), while under SSP and ASP pushes landing between the pieces
  // would give the worker a mix of two versions. Pushes: the shard gathers BSP pieces in the
  // worker's round buffer; under SSP and ASP it would stage a slice per worker.
  return LoneTransfersMaySplit(transfer) && bsp_.load() && shared_memory_shards() == 0 &&
         LoneChunkBytes(bytes) > 0;
}

absl::StatusOr<std::vector<Piece>> GrpcParameterClient::SplitAtShards(
    absl::Span<const KeyRange> parts, Transfer transfer) const {
  PiecePlanOptions plan{options_.total_params, static_cast<int>(stubs_.size()),
                        options_.chunk_bytes, options_.connections};
  int64_t bytes = 0;
  for (const KeyRange& part : parts) bytes += part.size() * static_cast<int64_t>(sizeof(float));
  if (SplitsLoneTransfer(transfer, bytes)) {
    plan.chunk_bytes = LoneChunkBytes(bytes);
    plan.connections = static_cast<int>(raw_stubs_[0].size());
  }
  return PlanPieces(parts, plan);
}

std::vector<int> GrpcParameterClient::FirstPieceOfShard(const std::vector<Piece>& pieces) const {
  std::vector<int> first(stubs_.size(), -1);
  for (size_t i = pieces.size(); i-- > 0;) first[pieces[i].shard] = static_cast<int>(i);
  return first;
}

absl::StatusOr<PullStats> GrpcParameterClient::Pull(int64_t clock, bool no_wait,
                                                    absl::Span<float> params) {
  return PullWithRows(clock, no_wait, params, {});
}

absl::StatusOr<PullStats> GrpcParameterClient::PullWithRows(int64_t clock, bool no_wait,
                                                            absl::Span<float> params,
                                                            absl::Span<const RowsToPull> rows) {
  const KeyRange whole{0, options_.total_params};
  return PullPieces(clock, no_wait, absl::MakeConstSpan(&whole, 1), params, nullptr, rows);
}

absl::Status GrpcParameterClient::PullRows(int64_t clock, absl::Span<const RowsToPull> rows) {
  return PullRowsAlone(clock, /*no_wait=*/true, rows);
}

absl::Status GrpcParameterClient::PullStepRows(int64_t clock, absl::Span<const RowsToPull> rows) {
  return PullRowsAlone(clock, /*no_wait=*/false, rows);
}

absl::Status GrpcParameterClient::PullRowsAlone(int64_t clock, bool no_wait,
                                                absl::Span<const RowsToPull> rows) {
  RETURN_IF_ERROR(CheckRows(rows, options_.tables));
  const int num_shards = static_cast<int>(stubs_.size());
  const RowsByShard routed = RoutePull(rows, num_shards);
  const std::vector<uint64_t> shard_incarnation = shard_incarnations();
  std::vector<Piece> pieces;
  std::vector<grpc::ByteBuffer> requests;
  for (int s = 0; s < num_shards; ++s) {
    if (routed[s].empty()) continue;
    Piece piece;
    piece.shard = s;
    const int64_t begin = ShardRange(options_.total_params, num_shards, s).begin;
    piece.range = KeyRange{begin, begin};  // rows alone
    ps::v1::PullRequest header =
        PullHeader(piece, clock, no_wait, /*slot=*/-1, shard_incarnation[s]);
    AddPullRows(routed[s], header.mutable_rows());
    requests.push_back(SerializeToByteBuffer(header));
    pieces.push_back(piece);
  }
  if (pieces.empty()) return absl::OkStatus();
  absl::Status decoded = absl::OkStatus();
  std::vector<grpc::ByteBuffer> replies;
  RETURN_IF_ERROR(CallRaw(
      "Pull", RawMethod{"/ps.v1.ParameterServer/Pull"}, pieces, requests, &replies,
      no_wait ? options_.call_timeout : options_.pull_timeout, [&](size_t i) {
        ps::v1::PullResponse header;
        SplitMessage split;
        absl::Status ok = SplitPayloadMessage(replies[i], ps::v1::PullResponse::kValuesFieldNumber,
                                              &header, &split);
        if (ok.ok()) {
          ok = ScatterPulledRows(routed[pieces[i].shard], header.rows(), rows, options_.tables);
        }
        if (!ok.ok() && decoded.ok()) {
          decoded = ReplyDoesNotFit("Pull", pieces[i].shard, ok);
        }
      }));
  return decoded;
}

absl::StatusOr<PullStats> GrpcParameterClient::PullParts(
    int64_t clock, absl::Span<const KeyRange> parts, absl::Span<float> params,
    const std::function<void(size_t)>& on_part) {
  return PullPieces(clock, /*no_wait=*/false, parts, params, on_part);
}

absl::StatusOr<PullStats> GrpcParameterClient::PullPieces(
    int64_t clock, bool no_wait, absl::Span<const KeyRange> parts, absl::Span<float> params,
    const std::function<void(size_t)>& on_part, absl::Span<const RowsToPull> rows) {
  if (static_cast<int64_t>(params.size()) != options_.total_params) {
    return absl::InvalidArgumentError("Pull: buffer size differs from the layout");
  }
  RETURN_IF_ERROR(CheckRows(rows, options_.tables));
  ASSIGN_OR_RETURN(const std::vector<Piece> pieces, SplitAtShards(parts, Transfer::kPull));
  const RowsByShard routed = RoutePull(rows, static_cast<int>(stubs_.size()));
  const std::vector<int> first_piece = FirstPieceOfShard(pieces);
  const std::vector<uint64_t> shard_incarnation = shard_incarnations();
  std::vector<grpc::ByteBuffer> requests(pieces.size());
  std::vector<size_t> missing(parts.size(), 0);  // pieces of each part not yet arrived
  // The parts of weights areas these calls borrow, given back when they have all finished.
  SharedRegion::Leases leases(region_.get(), Area::kWeights, pieces.size());
  // Into the caller's own copy of a weights area: the shards write the values in place.
  const int direct_slot = DirectSlot(Area::kWeights, params.data());
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& piece = pieces[i];
    // Observer reads (no_wait) carry no worker identity, so they cannot use the region.
    if (!no_wait) leases.Lend(i, piece.shard, piece.range, direct_slot);
    ps::v1::PullRequest header =
        PullHeader(piece, clock, no_wait, leases.slot(i), shard_incarnation[piece.shard]);
    if (first_piece[piece.shard] == static_cast<int>(i)) {
      AddPullRows(routed[piece.shard], header.mutable_rows());
    }
    requests[i] = SerializeToByteBuffer(header);
    ++missing[piece.part];
  }
  PullStats stats;
  stats.versions.assign(stubs_.size(), std::numeric_limits<int64_t>::max());
  absl::Status decoded = absl::OkStatus();
  // Decodes a piece the moment it arrives, so the caller can use its part while others travel.
  const auto on_arrival = [&](size_t i, const grpc::ByteBuffer& reply) {
    ps::v1::PullResponse header;
    SplitMessage split;  // the values are decoded from gRPC's buffers into `params`
    absl::Status ok =
        SplitPayloadMessage(reply, ps::v1::PullResponse::kValuesFieldNumber, &header, &split);
    if (ok.ok()) {
      ok = DecodePulled(pieces[i], header, split, leases.slot(i), direct_slot >= 0, params, &stats);
    }
    if (ok.ok() && first_piece[pieces[i].shard] == static_cast<int>(i)) {
      ok = ScatterPulledRows(routed[pieces[i].shard], header.rows(), rows, options_.tables);
    }
    if (!ok.ok()) {
      if (decoded.ok()) decoded = ReplyDoesNotFit("Pull", pieces[i].shard, ok);
      return;
    }
    if (--missing[pieces[i].part] == 0 && on_part) on_part(pieces[i].part);
  };
  std::vector<grpc::ByteBuffer> replies;
  RETURN_IF_ERROR(CallRaw("Pull", RawMethod{"/ps.v1.ParameterServer/Pull"}, pieces, requests,
                          &replies, options_.pull_timeout,
                          [&](size_t i) { on_arrival(i, replies[i]); }));
  RETURN_IF_ERROR(decoded);
  for (int64_t& v : stats.versions) {
    if (v == std::numeric_limits<int64_t>::max()) v = 0;  // a shard none of the parts touched
  }
  return stats;
}

absl::StatusOr<PushStats> GrpcParameterClient::Push(int64_t clock,
                                                    const std::vector<int64_t>& base_versions,
                                                    int num_samples,
                                                    absl::Span<const float> gradient) {
  return PushWithRows(clock, base_versions, num_samples, gradient, {});
}

absl::StatusOr<PushStats> GrpcParameterClient::PushWithRows(
    int64_t clock, const std::vector<int64_t>& base_versions, int num_samples,
    absl::Span<const float> gradient, absl::Span<const RowsToPush> rows) {
  const KeyRange whole{0, options_.total_params};
  return PushPieces(clock, base_versions, num_samples, gradient, absl::MakeConstSpan(&whole, 1),
                    rows);
}

absl::StatusOr<PushStats> GrpcParameterClient::PushParts(int64_t clock,
                                                         const std::vector<int64_t>& base_versions,
                                                         int num_samples,
                                                         absl::Span<const float> gradient,
                                                         absl::Span<const KeyRange> parts) {
  return PushPieces(clock, base_versions, num_samples, gradient, parts, {});
}

absl::StatusOr<PushStats> GrpcParameterClient::PushPieces(int64_t clock,
                                                          const std::vector<int64_t>& base_versions,
                                                          int num_samples,
                                                          absl::Span<const float> gradient,
                                                          absl::Span<const KeyRange> parts,
                                                          absl::Span<const RowsToPush> rows) {
  if (static_cast<int64_t>(gradient.size()) != options_.total_params ||
      base_versions.size() != stubs_.size()) {
    return absl::InvalidArgumentError("Push: gradient or base versions do not fit the layout");
  }
  RETURN_IF_ERROR(CheckRows(rows, options_.tables));
  ASSIGN_OR_RETURN(const std::vector<Piece> pieces,
                   SplitAtShards(parts, rows.empty() ? Transfer::kPush : Transfer::kWhole));
  if (!rows.empty() && pieces.size() != stubs_.size()) {
    return absl::FailedPreconditionError(
        "sparse rows travel with whole pushes: chunked or partial pushes cannot carry them "
        "(--chunk_mib 0, no --priority)");
  }
  const RowsByShard routed = RoutePush(rows, static_cast<int>(stubs_.size()));
  // Declared first, destroyed last: waits until gRPC has released every borrowed slice, so the
  // caller may reuse `gradient` (and this client its encode buffers) once Push returns.
  BorrowedPayload borrowed;
  const std::vector<uint64_t> shard_incarnation = shard_incarnations();
  std::vector<grpc::ByteBuffer> requests(pieces.size());
  if (encoded_.size() < pieces.size()) encoded_.resize(pieces.size());
  // The parts of gradient areas these calls borrow, given back when they have all finished.
  SharedRegion::Leases leases(region_.get(), Area::kGradient, pieces.size());
  PushStats stats;
  // From the caller's own copy of a gradient area: the shards read it in place.
  const int direct_slot = DirectSlot(Area::kGradient, gradient.data());
  for (size_t i = 0; i < pieces.size(); ++i) {
    PreparedPush push =
        PreparePush(i, pieces[i], clock, base_versions[pieces[i].shard], num_samples, gradient,
                    direct_slot, shard_incarnation[pieces[i].shard], borrowed, leases);
    stats.payload_bytes += push.payload_bytes;
    AddPushRows(routed[pieces[i].shard], rows, options_.tables, push.header.mutable_rows());
    requests[i] = JoinPayloadMessage(push.header, ps::v1::PushRequest::kGradientFieldNumber,
                                     std::move(push.payload));
  }
  const RawMethod push{"/ps.v1.ParameterServer/Push"};
  std::vector<grpc::ByteBuffer> replies;
  std::vector<ps::v1::PushResponse> responses(pieces.size());
  PushOutcomes outcomes(pieces.size());
  absl::Status parsed = absl::OkStatus();
  const absl::Status called = CallRaw(
      "Push", push, pieces, requests, &replies, options_.call_timeout,
      [&](size_t i) {
        const absl::Status ok = ParseFromByteBuffer(replies[i], &responses[i]);
        if (ok.ok()) {
          outcomes.Answered(i, responses[i]);
        } else if (parsed.ok()) {
          parsed = ReplyDoesNotFit("Push", pieces[i].shard, ok);
        }
      },
      &outcomes.sends);
  SettleTopK(pieces, outcomes);
  RETURN_IF_ERROR(called);
  RETURN_IF_ERROR(parsed);
  if (options_.duplicate_pushes) {
    std::vector<grpc::ByteBuffer> again;
    RETURN_IF_ERROR(CallRaw("Push", push, pieces, requests, &again, options_.call_timeout));
    for (size_t i = 0; i < again.size(); ++i) {
      ps::v1::PushResponse r;
      RETURN_IF_ERROR(ParseFromByteBuffer(again[i], &r));
      if (!r.duplicate()) {
        return absl::InternalError(absl::StrCat("shard ", pieces[i].shard,
                                                " accepted push of clock ", clock,
                                                " twice: exactly-once is broken"));
      }
    }
  }
  for (const auto& r : responses) CountPush(r, &stats);
  return stats;
}

absl::StatusOr<PushPullStats> GrpcParameterClient::PushPull(
    int64_t clock, const std::vector<int64_t>& base_versions, int num_samples,
    absl::Span<const float> gradient, int64_t pull_clock, absl::Span<float> params) {
  return PushPullWithRows(clock, base_versions, num_samples, gradient, {}, pull_clock, params, {});
}

absl::StatusOr<PushPullStats> GrpcParameterClient::PushPullWithRows(
    int64_t clock, const std::vector<int64_t>& base_versions, int num_samples,
    absl::Span<const float> gradient, absl::Span<const RowsToPush> push_rows, int64_t pull_clock,
    absl::Span<float> params, absl::Span<const RowsToPull> pull_rows) {
  // Sending every push twice checks exactly-once on Push; the two-call path does that.
  if (options_.duplicate_pushes) {
    return PushThenPull(clock, base_versions, num_samples, gradient, push_rows, pull_clock, params,
                        pull_rows);
  }
  if (static_cast<int64_t>(gradient.size()) != options_.total_params ||
      static_cast<int64_t>(params.size()) != options_.total_params ||
      base_versions.size() != stubs_.size()) {
    return absl::InvalidArgumentError(
        "PushPull: gradient, weights or base versions do not fit the layout");
  }
  const int64_t bytes = options_.total_params * static_cast<int64_t>(sizeof(float));
  if (push_rows.empty() && bytes >= options_.push_pull_split_bytes &&
      SplitsLoneTransfer(Transfer::kPush, bytes) && SplitsLoneTransfer(Transfer::kPull, bytes)) {
    return PushThenPull(clock, base_versions, num_samples, gradient, push_rows, pull_clock, params,
                        pull_rows);
  }
  const KeyRange whole{0, options_.total_params};
  ASSIGN_OR_RETURN(const std::vector<Piece> pieces,
                   SplitAtShards(absl::MakeConstSpan(&whole, 1), Transfer::kWhole));
  // A shard applies a step cut into chunks only once all its chunks are in, so a chunk's pull
  // must wait for the other chunks' pushes: two rounds, as Push then Pull.
  if (pieces.size() != stubs_.size()) {
    return PushThenPull(clock, base_versions, num_samples, gradient, push_rows, pull_clock, params,
                        pull_rows);
  }
  RETURN_IF_ERROR(CheckRows(push_rows, options_.tables));
  RETURN_IF_ERROR(CheckRows(pull_rows, options_.tables));
  const RowsByShard routed_push = RoutePush(push_rows, static_cast<int>(stubs_.size()));
  const RowsByShard routed_pull = RoutePull(pull_rows, static_cast<int>(stubs_.size()));
  BorrowedPayload borrowed;  // destroyed last: Push's contract on `gradient`
  const std::vector<uint64_t> shard_incarnation = shard_incarnations();
  std::vector<grpc::ByteBuffer> requests(pieces.size());
  if (encoded_.size() < pieces.size()) encoded_.resize(pieces.size());
  // The parts of each area these calls borrow, given back when they have all finished.
  SharedRegion::Leases gradient_leases(region_.get(), Area::kGradient, pieces.size());
  SharedRegion::Leases weights_leases(region_.get(), Area::kWeights, pieces.size());
  const int direct_gradient = DirectSlot(Area::kGradient, gradient.data());
  const int direct_weights = DirectSlot(Area::kWeights, params.data());
  PushPullStats stats;
  stats.pulled.versions.assign(stubs_.size(), std::numeric_limits<int64_t>::max());
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& piece = pieces[i];
    const uint64_t incarnation = shard_incarnation[piece.shard];
    PreparedPush push =
        PreparePush(i, piece, clock, base_versions[piece.shard], num_samples, gradient,
                    direct_gradient, incarnation, borrowed, gradient_leases);
    stats.pushed.payload_bytes += push.payload_bytes;
    const int weights_slot = weights_leases.Lend(i, piece.shard, piece.range, direct_weights);
    ps::v1::PushPullRequest header;
    *header.mutable_push() = std::move(push.header);
    *header.mutable_pull() =
        PullHeader(piece, pull_clock, /*no_wait=*/false, weights_slot, incarnation);
    AddPushRows(routed_push[piece.shard], push_rows, options_.tables,
                header.mutable_push()->mutable_rows());
    AddPullRows(routed_pull[piece.shard], header.mutable_pull()->mutable_rows());
    requests[i] = JoinPayloadMessage(header, ps::v1::PushPullRequest::kGradientFieldNumber,
                                     std::move(push.payload));
  }
  absl::Status decoded = absl::OkStatus();
  std::vector<grpc::ByteBuffer> replies;
  PushOutcomes outcomes(pieces.size());
  const absl::Status called = CallRaw(
      "PushPull", RawMethod{"/ps.v1.ParameterServer/PushPull"}, pieces, requests, &replies,
      options_.pull_timeout,
      [&](size_t i) {
        ps::v1::PushPullResponse header;
        SplitMessage split;  // the values are decoded from gRPC's buffers into `params`
        absl::Status ok = SplitPayloadMessage(
            replies[i], ps::v1::PushPullResponse::kValuesFieldNumber, &header, &split);
        if (ok.ok()) {
          outcomes.Answered(i, header.push());
          ok = DecodePulled(pieces[i], header.pull(), split, weights_leases.slot(i),
                            direct_weights >= 0, params, &stats.pulled);
        }
        if (ok.ok()) {
          ok = ScatterPulledRows(routed_pull[pieces[i].shard], header.pull().rows(), pull_rows,
                                 options_.tables);
        }
        if (!ok.ok()) {
          if (decoded.ok()) decoded = ReplyDoesNotFit("PushPull", pieces[i].shard, ok);
          return;
        }
        CountPush(header.push(), &stats.pushed);
      },
      &outcomes.sends);
  SettleTopK(pieces, outcomes);
  RETURN_IF_ERROR(called);
  RETURN_IF_ERROR(decoded);
  for (int64_t& v : stats.pulled.versions) {
    if (v == std::numeric_limits<int64_t>::max()) v = 0;  // a shard with no piece
  }
  return stats;
}

GrpcParameterClient::PreparedPush GrpcParameterClient::PreparePush(
    size_t i, const Piece& piece, int64_t clock, int64_t base_version, int num_samples,
    absl::Span<const float> gradient, int direct_slot, uint64_t shard_incarnation,
    BorrowedPayload& borrowed, SharedRegion::Leases& leases) {
  const KeyRange r = piece.range;
  PreparedPush out;
  ps::v1::PushRequest& header = out.header;
  header.set_layout_fingerprint(options_.fingerprint);
  header.set_begin(r.begin);
  header.set_end(r.end);
  header.set_rank(options_.rank);
  header.set_incarnation(options_.incarnation);
  header.set_shard_incarnation(shard_incarnation);
  header.set_clock(clock);
  header.set_base_version(base_version);
  header.set_num_samples(num_samples);
  header.set_encoding(static_cast<ps::v1::TensorEncoding>(options_.push_encoding));
  const absl::Span<const float> slice = gradient.subspan(r.begin, r.size());
  std::vector<char>& encoded = encoded_[i];
  // The payload's bytes: the caller's gradient itself (float32) or an encoding of it.
  absl::Span<const char> bytes;
  switch (options_.push_encoding) {
    case TensorEncoding::kF32:
      bytes = {reinterpret_cast<const char*>(slice.data()), slice.size() * sizeof(float)};
      break;
    case TensorEncoding::kBf16:
    case TensorEncoding::kF16:
      encoded.resize(slice.size() * UnitBytes(options_.push_encoding));
      EncodeDense(options_.push_encoding, slice, encoded.data());
      bytes = {encoded.data(), encoded.size()};
      break;
    case TensorEncoding::kTopK:
      topk_->Compress(gradient, r.begin, r.end, &encoded);
      bytes = {encoded.data(), encoded.size()};
      break;
  }
  out.payload_bytes = static_cast<int64_t>(bytes.size());
  // A shard that shares the region reads the payload there; a top-k payload larger than the
  // area's part (ratio above 1/2) stays in the message.
  if (bytes.size() <= 4 * static_cast<size_t>(r.size())) {
    out.slot = leases.Lend(i, piece.shard, r, direct_slot);
  }
  if (out.slot >= 0) {
    // In place already when direct (a float32 payload is the caller's slice itself).
    if (direct_slot < 0) {
      std::memcpy(region_->At(Area::kGradient, out.slot, r.begin), bytes.data(), bytes.size());
    }
    header.set_shared_bytes(static_cast<int64_t>(bytes.size()));
    header.set_shared_slot(out.slot);
  } else {
    out.payload.push_back(borrowed.Borrow(bytes.data(), bytes.size()));
  }
  return out;
}

ps::v1::PullRequest GrpcParameterClient::PullHeader(const Piece& piece, int64_t clock, bool no_wait,
                                                    int slot, uint64_t shard_incarnation) const {
  ps::v1::PullRequest header;
  header.set_into_shared_memory(slot >= 0);
  if (slot > 0) header.set_shared_slot(slot);
  header.set_layout_fingerprint(options_.fingerprint);
  header.set_begin(piece.range.begin);
  header.set_end(piece.range.end);
  header.set_rank(options_.rank);
  header.set_clock(clock);
  header.set_no_wait(no_wait);
  header.set_encoding(static_cast<ps::v1::TensorEncoding>(options_.pull_encoding));
  if (!no_wait) {
    header.set_incarnation(options_.incarnation);
    header.set_shard_incarnation(shard_incarnation);
  }
  return header;
}

absl::Status GrpcParameterClient::DecodePulled(const Piece& piece,
                                               const ps::v1::PullResponse& header,
                                               SplitMessage& split, int slot, bool direct,
                                               absl::Span<float> params, PullStats* stats) const {
  const KeyRange r = piece.range;
  ASSIGN_OR_RETURN(const TensorEncoding encoding, TensorEncodingFromWire(header.encoding()));
  if (header.in_shared_memory()) {
    if (slot < 0 || !split.payload.empty()) {
      return absl::InvalidArgumentError("values in shared memory that was not lent to this call");
    }
    split.payload.assign(1, absl::Span<const char>(region_->At(Area::kWeights, slot, r.begin),
                                                   r.size() * UnitBytes(encoding)));
  }
  ASSIGN_OR_RETURN(const EncodedTensor values,
                   EncodedTensor::FromChunks(encoding, r.size(), split.payload));
  if (!values.dense() || !values.CheckShape("values").ok()) {
    return absl::InvalidArgumentError(absl::StrCat(values.units(), " ",
                                                   TensorEncodingName(values.encoding()),
                                                   " values for a range of ", r.size()));
  }
  // Written in place already when the caller's buffer is the area itself.
  if (!(direct && header.in_shared_memory())) values.DecodeInto(params.subspan(r.begin, r.size()));
  stats->payload_bytes += values.payload_bytes();
  stats->versions[piece.shard] = std::min(stats->versions[piece.shard], header.version());
  stats->server_wait = std::max(stats->server_wait, absl::Microseconds(header.wait_us()));
  return absl::OkStatus();
}

void GrpcParameterClient::SettleTopK(const std::vector<Piece>& pieces,
                                     const PushOutcomes& outcomes) {
  if (topk_ == nullptr) return;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const bool sent_before = i < outcomes.sends.size() && outcomes.sends[i] > 1;
    const bool taken = outcomes.answered[i] && (!outcomes.duplicate[i] || sent_before);
    if (!taken) topk_->Restore(pieces[i].range.begin, pieces[i].range.end);
  }
}

absl::Status GrpcParameterClient::ReplyDoesNotFit(const char* method, int shard,
                                                  const absl::Status& why) {
  return absl::DataLossError(
      absl::StrCat(method, ": shard ", shard, " sent a reply that does not fit: ", why.message()));
}

void GrpcParameterClient::CountPush(const ps::v1::PushResponse& r, PushStats* stats) {
  stats->applied += r.applied();
  stats->buffered += r.buffered();
  stats->duplicates += r.duplicate() && !r.staged();
  stats->dropped += r.dropped();
  stats->late += r.late();
  if (r.applied()) stats->max_staleness = std::max(stats->max_staleness, r.staleness());
}

}  // namespace ps
