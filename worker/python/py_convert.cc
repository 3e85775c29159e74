#include "worker/python/py_convert.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/transport/grpc_security.h"
#include "worker/python/py_support.h"
#include "worker/shard_report_json.h"

namespace ps {

GrpcClientOptions ClientOptions(const WorkerConfig& c) {
  GrpcClientOptions o;
  o.servers = c.servers;
  o.rank = c.rank;
  o.call_timeout = absl::Seconds(c.call_timeout_s);
  o.pull_timeout = absl::Seconds(c.pull_timeout_s);
  o.retry_for = c.retry_s <= 0 ? absl::InfiniteDuration() : absl::Seconds(c.retry_s);
  SecurityOptions security;
  security.token_file = c.token_file;
  security.tls_ca = c.tls_ca;
  security.tls_cert = c.tls_cert;
  security.tls_key = c.tls_key;
  security.tls_server_name = c.tls_server_name;
  security.allow_plaintext_token = c.allow_plaintext_token;
  o.security = ValueOrThrow(MakeClientSecurity(security));
  o.shared_memory = c.shared_memory;
  o.local_calls = c.local_calls;
  return o;
}

void CheckConfig(const WorkerConfig& c) {
  if (c.servers.empty()) {
    throw StatusError{absl::InvalidArgumentError("no servers: pass servers=\"host:port,...\"")};
  }
  if (c.rank < 0 || (c.num_workers > 0 && c.rank >= c.num_workers)) {
    throw StatusError{absl::InvalidArgumentError(
        absl::StrCat("rank ", c.rank, " is not in [0, num_workers ", c.num_workers, ")"))};
  }
}

py::dict PushStatsDict(const PushStats& s) {
  py::dict d;
  d["staleness"] = s.max_staleness;
  d["applied"] = s.applied;
  d["buffered"] = s.buffered;
  d["duplicates"] = s.duplicates;
  d["dropped"] = s.dropped;
  d["late"] = s.late;
  d["push_bytes"] = s.payload_bytes;
  return d;
}

void AddPushStats(const PushStats& part, PushStats* total) {
  total->max_staleness = std::max(total->max_staleness, part.max_staleness);
  total->applied += part.applied;
  total->buffered += part.buffered;
  total->duplicates += part.duplicates;
  total->dropped += part.dropped;
  total->late += part.late;
  total->payload_bytes += part.payload_bytes;
}

py::dict WorkAccountDict(const WorkAccount& work) {
  py::list workers;
  for (const WorkerWork& w : work.workers) {
    py::dict d;
    ForEachReportedField(w, [&d](const char* name, const auto& value) { d[name] = value; });
    workers.append(d);
  }
  py::dict d;
  d["gradients_expected"] = work.gradients_expected;
  d["gradients_applied"] = work.gradients_applied;
  d["samples_skipped"] = work.samples_skipped;
  d["job_done"] = work.job_done;
  d["workers"] = workers;
  return d;
}

std::vector<std::string> ReportsJson(const std::vector<ShardReport>& reports,
                                     const std::vector<std::string>& servers) {
  std::vector<std::string> out;
  for (size_t i = 0; i < reports.size(); ++i)
    out.push_back(ShardReportJson(reports[i], servers[i]));
  return out;
}

}  // namespace ps
