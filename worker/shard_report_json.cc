#include "worker/shard_report_json.h"

#include "common/base/json_lines.h"

namespace ps {

std::string ShardReportJson(const ShardReport& r, const std::string& server) {
  std::vector<JsonObject> workers;
  for (const auto& w : r.workers) {
    workers.push_back(JsonObject()
                          .Add("rank", w.rank)
                          .Add("state", w.state)
                          .Add("clock", w.clock)
                          .Add("applied", w.applied)
                          .Add("max_staleness", w.max_staleness)
                          .Add("mean_staleness", w.mean_staleness)
                          .Add("staleness_counts", w.staleness_counts)
                          .Add("dropped", w.dropped)
                          .Add("late", w.late)
                          .Add("planned_steps", w.planned_steps)
                          .Add("samples_per_step", w.samples_per_step)
                          .Add("skipped_steps", w.skipped_steps));
  }
  std::vector<JsonObject> tables;
  for (const SparseTableStatus& t : r.tables) {
    tables.push_back(JsonObject()
                         .Add("name", t.name)
                         .Add("rows", t.rows)
                         .Add("bytes", t.bytes)
                         .Add("capacity", t.capacity)
                         .Add("admissions", t.counters.admissions)
                         .Add("evictions", t.counters.evictions)
                         .Add("not_admitted", t.counters.not_admitted));
  }
  return JsonObject()
      .Add("server", server)
      .Add("shard_id", r.shard_id)
      .Add("mode", ConsistencyModeName(r.mode))
      .Add("staleness_bound", r.staleness_bound)
      .Add("initialized", r.initialized)
      .Add("begin", r.range.begin)
      .Add("end", r.range.end)
      .Add("version", r.version)
      .Add("min_clock", r.min_clock)
      .Add("rejected_nonfinite", r.rejected_nonfinite)
      .Add("update_rule", r.update_rule)
      .Add("backup_workers", r.backup_workers)
      .Add("restored_version", r.restored_version)
      .Add("checkpoint_version", r.checkpoint_version)
      .Add("pushes_accepted", r.pushes_accepted)
      .Add("pushes_duplicate", r.pushes_duplicate)
      .Add("pieces_received", r.pieces_received)
      .Add("shared_memory_workers", r.shared_memory_workers)
      .Add("shared_memory_payloads", r.shared_memory_payloads)
      .Add("local_calls", r.local_calls)
      .Add("rejected_unauthenticated", r.rejected_unauthenticated)
      .Add("finished_at_restore", r.finished_at_restore)
      .Add("decay_updates", r.decay_updates)
      .Add("tables", tables)
      .Add("workers", workers)
      .str();
}

}  // namespace ps
