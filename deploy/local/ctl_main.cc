// ps_ctl: asks every shard for its state.
//   ps_ctl status --servers host:port,...    one table per shard (or --json: one line per shard)
//   ps_ctl health --servers host:port,...    grpc.health.v1 Check of each; exit 0 iff all SERVING

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/cli/cli.h"
#include "common/cli/client_flags.h"
#include "common/cli/security_flags.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "worker/grpc_parameter_client.h"
#include "worker/shard_report_json.h"
#include "worker/work_account.h"

ABSL_FLAG(bool, json, false, "Print one JSON object per shard instead of tables.");
ABSL_FLAG(int32_t, timeout_s, 5, "Deadline of each call.");
ABSL_FLAG(bool, plaintext, false,
          "health: connect without TLS whatever the TLS flags or PS_TLS_* variables say (a "
          "server's --health_port).");
ABSL_FLAG(std::string, service, "",
          "health: the service to check; \"\" is the server as a whole (listening, restore "
          "done), \"ps.v1.ParameterServer\" is SERVING once the shard holds parameters.");

namespace {

// grpc.health.v1 Check of every server; prints one line each. Exit code 0 iff all are SERVING.
int Health(const std::vector<std::string>& servers, const ps::ClientSecurity& security) {
  int exit_code = 0;
  for (const std::string& server : servers) {
    auto channel = grpc::CreateCustomChannel(
        server,
        security.credentials != nullptr ? security.credentials : grpc::InsecureChannelCredentials(),
        ps::ClientChannelArguments(4 << 20, security));
    auto stub = grpc::health::v1::Health::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s)));
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(absl::GetFlag(FLAGS_service));
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status st = stub->Check(&ctx, request, &response);
    if (!st.ok()) {
      std::printf("%s %s: %s\n", server.c_str(), "UNREACHABLE", st.error_message().c_str());
      exit_code = 1;
      continue;
    }
    std::printf(
        "%s %s\n", server.c_str(),
        grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status()).c_str());
    if (response.status() != grpc::health::v1::HealthCheckResponse::SERVING) exit_code = 1;
  }
  return exit_code;
}

// One shard's report as text lines with a table of its workers.
void PrintText(const ps::ShardReport& r, const std::string& server) {
  std::printf(
      "shard %d (%s)  mode %s%s  range [%lld, %lld)  version %lld  min_clock %lld  "
      "rejected_nonfinite %lld\n",
      r.shard_id, server.c_str(), ps::ConsistencyModeName(r.mode).c_str(),
      r.mode == ps::ConsistencyMode::kSsp ? (" s=" + std::to_string(r.staleness_bound)).c_str()
                                          : "",
      static_cast<long long>(r.range.begin), static_cast<long long>(r.range.end),
      static_cast<long long>(r.version), static_cast<long long>(r.min_clock),
      static_cast<long long>(r.rejected_nonfinite));
  std::printf("  update rule %s, backup workers %d\n", r.update_rule.c_str(), r.backup_workers);
  std::printf(
      "  pushes accepted %lld, duplicates %lld; checkpoint version %lld, restored version "
      "%lld; unauthenticated calls %lld\n",
      static_cast<long long>(r.pushes_accepted), static_cast<long long>(r.pushes_duplicate),
      static_cast<long long>(r.checkpoint_version), static_cast<long long>(r.restored_version),
      static_cast<long long>(r.rejected_unauthenticated));
  std::printf(
      "  pieces received %lld; shared memory: %d workers, %lld payloads; local calls %lld\n",
      static_cast<long long>(r.pieces_received), r.shared_memory_workers,
      static_cast<long long>(r.shared_memory_payloads), static_cast<long long>(r.local_calls));
  for (const ps::SparseTableStatus& t : r.tables) {
    std::printf(
        "  table %s: %lld rows (capacity %lld), %lld bytes; %lld admitted, %lld evicted, "
        "%lld gradients not admitted\n",
        t.name.c_str(), static_cast<long long>(t.rows), static_cast<long long>(t.capacity),
        static_cast<long long>(t.bytes), static_cast<long long>(t.counters.admissions),
        static_cast<long long>(t.counters.evictions),
        static_cast<long long>(t.counters.not_admitted));
  }
  std::printf("  %-5s %-8s %8s %8s %8s %7s %5s %7s %9s %9s  %s\n", "rank", "state", "clock",
              "planned", "applied", "dropped", "late", "skipped", "max_stale", "mean_stale",
              "staleness histogram (0,1,2,...)");
  for (const auto& w : r.workers) {
    std::printf("  %-5d %-8s %8lld %8lld %8lld %7lld %5lld %7lld %9lld %9.2f  [%s]\n", w.rank,
                w.state.c_str(), static_cast<long long>(w.clock),
                static_cast<long long>(w.planned_steps), static_cast<long long>(w.applied),
                static_cast<long long>(w.dropped), static_cast<long long>(w.late),
                static_cast<long long>(w.skipped_steps), static_cast<long long>(w.max_staleness),
                w.mean_staleness, absl::StrJoin(w.staleness_counts, ",").c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> rest = ps::ParseCommandLine(
      argc, argv,
      "Inspects a running cluster.\n  ps_ctl status --servers 127.0.0.1:5000,127.0.0.1:5001\n"
      "  ps_ctl health --servers 127.0.0.1:5000 --service ps.v1.ParameterServer");
  if (rest.size() != 1 || (rest[0] != "status" && rest[0] != "health")) {
    std::fprintf(stderr,
                 "usage: ps_ctl status --servers host:port,... [--json]\n"
                 "       ps_ctl health --servers host:port,... [--service NAME]\n");
    return 2;
  }
  ps::GrpcClientOptions o;
  o.servers = absl::StrSplit(absl::GetFlag(FLAGS_servers), ',', absl::SkipEmpty());
  o.call_timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  o.retry_for = absl::ZeroDuration();
  auto security = ps::MakeClientSecurity(ps::SecurityOptionsFromFlags());
  if (!security.ok()) {
    std::fprintf(stderr, "ps_ctl: %s\n", security.status().ToString().c_str());
    return 2;
  }
  o.security = *security;
  if (rest[0] == "health") {
    if (o.servers.empty()) {
      std::fprintf(stderr, "ps_ctl: no --servers\n");
      return 2;
    }
    return Health(o.servers, absl::GetFlag(FLAGS_plaintext) ? ps::ClientSecurity{} : o.security);
  }
  auto client = ps::GrpcParameterClient::Create(o);
  if (!client.ok()) {
    std::fprintf(stderr, "ps_ctl: %s\n", client.status().ToString().c_str());
    return 2;
  }
  auto reports = (*client)->Status();
  if (!reports.ok()) {
    // A missing or wrong token is the caller's configuration (2); a shard down is 1.
    std::fprintf(stderr, "ps_ctl: %s\n", reports.status().ToString().c_str());
    return ps::ExitCodeOf(reports.status());
  }
  for (size_t i = 0; i < reports->size(); ++i) {
    if (absl::GetFlag(FLAGS_json)) {
      std::printf("%s\n", ps::ShardReportJson((*reports)[i], o.servers[i]).c_str());
    } else {
      PrintText((*reports)[i], o.servers[i]);
    }
  }
  if (!absl::GetFlag(FLAGS_json)) {
    const ps::WorkAccount work = ps::AccountWork(*reports);
    std::printf("job: %lld of %lld gradients applied, %lld samples skipped%s%s\n",
                static_cast<long long>(work.gradients_applied),
                static_cast<long long>(work.gradients_expected),
                static_cast<long long>(work.samples_skipped), work.job_done ? "; done" : "",
                work.finished_at_restore ? "; restored a finished job" : "");
  }
  return 0;
}
