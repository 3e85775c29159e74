// The service's calls that move no tensor: Register, Heartbeat, AttachSharedMemory and
// GetStatus (Init, which carries the initial values, stays with Push and Pull in service.cc).

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/shm/shared_region_layout.h"
#include "common/transport/grpc_status.h"
#include "server/service.h"
#include "server/update_rule.h"

namespace ps {

grpc::Status ParameterServerService::HandleRegister(const ps::v1::RegisterRequest& req,
                                                    ps::v1::RegisterResponse* resp) {
  absl::StatusOr<Shard::RegisterResult> r =
      shard_.Register(req.rank(), req.layout_fingerprint(), req.incarnation(),
                      WorkPlan{req.plan().steps(), req.plan().samples_per_step()});
  if (!r.ok()) return ToGrpcStatus(r.status());
  // A new process at this rank: the old one's region goes (once no handler uses it).
  regions_.ForgetOthersThan(req.rank(), req.incarnation());
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
  resp->set_job_finished(r->job_finished);
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::HandleHeartbeat(const ps::v1::HeartbeatRequest& req,
                                                     ps::v1::HeartbeatResponse* resp) {
  resp->set_lease_ms(absl::ToInt64Milliseconds(shard_.options().lease));
  const Caller caller{req.rank(), req.incarnation(), req.shard_incarnation()};
  if (req.leaving()) return ToGrpcStatus(shard_.Leave(caller));
  return ToGrpcStatus(
      shard_.Heartbeat(caller, WorkPlan{req.plan().steps(), req.plan().samples_per_step()}));
}

grpc::Status ParameterServerService::HandleAttachSharedMemory(
    const ps::v1::AttachSharedMemoryRequest& req, ps::v1::AttachSharedMemoryResponse* resp) {
  if (!options_.accept_shared_memory) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this shard does not accept shared memory (--shared_memory=false)");
  }
  // Only a registered, current worker process may attach (this also renews its lease).
  absl::Status s = shard_.Heartbeat(Caller{req.rank(), req.incarnation(), req.shard_incarnation()});
  if (!s.ok()) return ToGrpcStatus(s);
  if (req.incarnation() == 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "a shared region belongs to a worker process: incarnation is required");
  }
  if (req.total_params() <= 0 || req.total_params() > (int64_t{1} << 40)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("total_params ", req.total_params(), " is out of range"));
  }
  const int slots = std::max(req.slots(), 1);
  const SharedRegionLayout layout{req.total_params(), slots};
  if (req.slots() < 0 || slots > kMaxSharedSlots) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("slots ", req.slots(), " is not in [0, ", kMaxSharedSlots, "]"));
  }
  const absl::Status attached =
      regions_.Attach(req.rank(), req.incarnation(), req.pid(), req.fd(), req.nonce(), layout);
  if (!attached.ok()) return ToGrpcStatus(attached);
  resp->set_local_socket(local_socket_);
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
  resp->set_shared_memory_workers(shared_memory_workers());
  resp->set_shared_memory_payloads(shared_memory_payloads());
  resp->set_local_calls(local_calls_.load());
  resp->set_finished_at_restore(s.finished_at_restore);
  resp->set_decay_updates(s.decay_updates);
  resp->set_finished_job_rerun(s.finished_job_rerun);
  for (const SparseTableStatus& t : shard_.TableStatuses()) {
    ps::v1::TableStatus* out = resp->add_tables();
    out->set_name(t.name);
    out->set_rows(t.rows);
    out->set_bytes(t.bytes);
    out->set_capacity(t.capacity);
    out->set_admissions(t.counters.admissions);
    out->set_evictions(t.counters.evictions);
    out->set_not_admitted(t.counters.not_admitted);
  }
  const SparseCallTiming timing = shard_.sparse_timing();
  resp->set_sparse_pulls(timing.pulls);
  resp->set_sparse_pull_seconds(timing.pull_seconds);
  resp->set_sparse_pushes(timing.pushes);
  resp->set_sparse_push_seconds(timing.push_seconds);
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
    out->set_planned_steps(w.plan.steps);
    out->set_samples_per_step(w.plan.samples_per_step);
    out->set_skipped_steps(w.skipped_steps);
  }
  return grpc::Status::OK;
}

}  // namespace ps
