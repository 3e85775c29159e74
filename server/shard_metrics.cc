#include "server/shard_metrics.h"

#include <string>
#include <utility>
#include <vector>

#include "common/metrics/prometheus.h"

namespace ps {

std::string ShardMetricsText(ShardServer& server) {
  const ShardStatus s = server.shard().GetStatus();
  const PrometheusText::Labels shard = {{"shard", std::to_string(s.shard_id)}};
  PrometheusText out;
  out.Gauge("ps_shard_version", "Updates the shard has applied.", s.version, shard)
      .Gauge("ps_shard_min_clock", "Smallest clock among the live workers.", s.min_clock, shard)
      .Gauge("ps_shard_initialized", "1 once the shard holds parameters.", s.initialized, shard)
      .Counter("ps_shard_pushes_accepted_total",
               "Pushes acknowledged as applied, buffered, dropped or late.", s.pushes_accepted,
               shard)
      .Counter("ps_shard_pushes_duplicate_total", "Pushes acknowledged as duplicates (retries).",
               s.pushes_duplicate, shard)
      .Counter("ps_shard_push_pieces_total",
               "Pushes of part of the shard's range (priority scheduling), staged.",
               s.pieces_received, shard)
      .Counter("ps_shard_pushes_rejected_nonfinite_total", "Pushes refused for NaN/Inf values.",
               s.rejected_nonfinite, shard)
      .Counter("ps_shard_shared_memory_payloads_total",
               "Pushes and pulls whose payload went through a worker's shared region.",
               server.service().shared_memory_payloads(), shard)
      .Counter("ps_shard_calls_unauthenticated_total",
               "Calls refused for a missing or wrong cluster token.",
               server.service().rejected_unauthenticated(), shard)
      .Gauge("ps_shard_checkpoint_version", "Version of the newest checkpoint written (-1: none).",
             server.service().checkpoint_version(), shard)
      .Counter("ps_shard_checkpoints_superseded_total",
               "Checkpoints not written because a newer one was queued before the disk took them.",
               server.checkpoints_superseded(), shard)
      .Gauge("ps_shard_restored_version", "Version of the checkpoint restored at start (-1: none).",
             s.restored_version, shard);
  for (const SparseTableStatus& t : server.shard().TableStatuses()) {
    PrometheusText::Labels table = shard;
    table["table"] = t.name;
    out.Gauge("ps_table_rows", "Rows of the sparse table on this shard.", t.rows, table)
        .Gauge("ps_table_bytes", "Bytes of the table's rows, their optimizer state and sketch.",
               t.bytes, table)
        .Gauge("ps_table_capacity", "Rows the table may hold on this shard (0: no limit).",
               t.capacity, table)
        .Counter("ps_table_admissions_total", "Rows created.", t.counters.admissions, table)
        .Counter("ps_table_evictions_total", "Rows removed to make room.", t.counters.evictions,
                 table)
        .Counter("ps_table_gradients_not_admitted_total",
                 "Row gradients dropped because their key was not admitted yet.",
                 t.counters.not_admitted, table);
  }
  const SparseCallTiming timing = server.shard().sparse_timing();
  if (timing.pulls + timing.pushes > 0) {
    out.Counter("ps_shard_sparse_pulls_total", "Pulls that read sparse rows.", timing.pulls, shard)
        .Counter("ps_shard_sparse_pull_seconds_total", "Time spent reading rows for pulls.",
                 timing.pull_seconds, shard)
        .Counter("ps_shard_sparse_pushes_total", "Pushes that carried sparse rows.", timing.pushes,
                 shard)
        .Counter("ps_shard_sparse_push_seconds_total",
                 "Time spent applying (or buffering) pushed rows.", timing.push_seconds, shard);
  }
  StalenessHistogram all;
  for (const WorkerStatusInfo& w : s.workers) {
    PrometheusText::Labels worker = shard;
    worker["rank"] = std::to_string(w.rank);
    out.Gauge("ps_shard_worker_clock", "Steps the worker has pushed to this shard.", w.clock,
              worker)
        .Gauge("ps_shard_worker_live", "1 while the worker holds a lease.",
               w.state == WorkerState::kLive, worker)
        .Counter("ps_shard_gradients_applied_total", "Gradients of the worker applied.",
                 w.staleness.count(), worker)
        .Counter("ps_shard_gradients_dropped_total", "Gradients refused as too stale.", w.dropped,
                 worker)
        .Counter("ps_shard_pushes_late_total", "BSP pushes that missed their round.", w.late,
                 worker)
        .Gauge("ps_shard_gradients_expected",
               "Gradients the worker declared it will push (its steps); 0: not declared yet.",
               w.plan.steps, worker)
        .Counter("ps_shard_samples_skipped_total",
                 "Samples of the worker's steps that BSP rounds applied without (it was gone).",
                 w.skipped_steps * w.plan.samples_per_step, worker)
        .Gauge("ps_shard_staleness_max", "Largest staleness of the worker's applied gradients.",
               w.staleness.max(), worker);
    all.Merge(w.staleness);
  }
  // Cumulative counts at powers of two; the exact buckets are in ps_ctl status.
  std::vector<std::pair<double, int64_t>> cumulative;
  const std::vector<int64_t>& counts = all.counts();
  int64_t running = 0;
  size_t next = 0;
  for (int le : {0, 1, 2, 4, 8, 16, 32}) {
    for (; next < counts.size() && next <= static_cast<size_t>(le); ++next) running += counts[next];
    cumulative.emplace_back(le, running);
  }
  out.Histogram("ps_shard_staleness", "Staleness of applied gradients, in updates of this shard.",
                cumulative, static_cast<double>(all.sum()), all.count(), shard);
  return out.str();
}

}  // namespace ps
