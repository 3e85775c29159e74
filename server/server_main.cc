// ps_server: one parameter-server shard. Parses flags into ShardServerOptions, serves until
// SIGINT or SIGTERM, then shuts down in order and exits 0.

#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/process_tuning.h"
#include "common/base/shutdown_signal.h"
#include "common/base/status_macros.h"
#include "common/base/whole_file.h"
#include "common/cli/cli.h"
#include "common/cli/cluster_flags.h"
#include "common/cli/endpoint_flags.h"
#include "common/cli/log_flags.h"
#include "common/cli/optimizer_flags.h"
#include "common/cli/security_flags.h"
#include "common/metrics/prometheus.h"
#include "server/server_flags.h"
#include "server/shard_flags.h"
#include "server/shard_metrics.h"
#include "server/shard_server.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(int32_t, shard_id, -1,
          "This shard's index in [0, num_shards); -1: the ordinal of $POD_NAME (a StatefulSet "
          "pod: ps-3 is shard 3), else 0.");
ABSL_FLAG(int32_t, num_shards, 1, "Number of shards the parameters are split over.");
ABSL_FLAG(std::string, host, "127.0.0.1", "Address to listen on; 0.0.0.0 for all interfaces.");
ABSL_FLAG(int32_t, port, 0, "TCP port; 0 picks a free one (see --port_file).");
ABSL_FLAG(std::string, port_file, "",
          "If set, the bound port is written to this file (atomically) once serving.");
ABSL_FLAG(std::string, record_updates, "",
          "Append every gradient applied on its own (SSP, ASP) to this file, in apply order, "
          "for ps_replay.");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Folder of this shard's checkpoints: the newest intact one is restored at start, new "
          "ones are written as --checkpoint_every/--checkpoint_seconds say and at SIGTERM.");
ABSL_FLAG(int32_t, checkpoint_keep, 3, "Checkpoints kept in --checkpoint_dir.");
ABSL_FLAG(int64_t, restore_version, -1,
          "Restore exactly checkpoint N of --checkpoint_dir (it must be there intact: the start "
          "fails otherwise) and remove the newer ones, instead of the newest; ps_launch "
          "--rollback_shards sets it to put every shard back to one BSP cut. -1: the newest.");
ABSL_FLAG(int32_t, health_port, -1,
          "Also serve grpc.health.v1 alone, in plaintext, on this port (for probes that cannot "
          "speak TLS; -1: off).");

namespace {

int ShardId() {
  return ps::IndexFromFlagOrEnvironment("shard_id", absl::GetFlag(FLAGS_shard_id), "POD_NAME",
                                        /*ordinal_of_name=*/true);
}

absl::StatusOr<ps::ShardServerOptions> OptionsFromFlags() {
  ps::ShardServerOptions o;
  o.host = absl::GetFlag(FLAGS_host);
  o.port = absl::GetFlag(FLAGS_port);
  if (o.port < 0 || o.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--port ", o.port, " is not a TCP port"));
  }
  if (absl::GetFlag(FLAGS_max_message_mb) < 1 || absl::GetFlag(FLAGS_max_message_mb) > 2047) {
    return absl::InvalidArgumentError("--max_message_mb must be in [1, 2047]");
  }
  o.max_message_bytes = absl::GetFlag(FLAGS_max_message_mb) << 20;
  o.record_updates_path = absl::GetFlag(FLAGS_record_updates);
  o.security = ps::SecurityOptionsFromFlags();
  o.health_port = absl::GetFlag(FLAGS_health_port);
  o.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  o.checkpoint_keep = absl::GetFlag(FLAGS_checkpoint_keep);
  o.restore_version = absl::GetFlag(FLAGS_restore_version);
  if (o.restore_version < -1) return absl::InvalidArgumentError("--restore_version must be >= -1");
  o.checkpoint_every_updates = absl::GetFlag(FLAGS_checkpoint_every);
  if (o.checkpoint_keep < 1) return absl::InvalidArgumentError("--checkpoint_keep must be >= 1");
  o.drop_push_reply_every = absl::GetFlag(FLAGS_fault_drop_push_reply_every);
  o.accept_shared_memory = absl::GetFlag(FLAGS_shared_memory);
  o.local_calls = absl::GetFlag(FLAGS_local_calls);
  const int num_workers = absl::GetFlag(FLAGS_num_workers);
  if (num_workers < 1) {
    return absl::InvalidArgumentError("--num_workers (the workers in the job) must be >= 1");
  }
  ASSIGN_OR_RETURN(
      o.shard, ps::ShardOptionsFromFlags(ShardId(), absl::GetFlag(FLAGS_num_shards), num_workers));
  o.checkpoint_interval = absl::Seconds(absl::GetFlag(FLAGS_checkpoint_seconds));  // checked above
  return o;
}

// Logs why the shard cannot start and gives the exit code: 2, a configuration error no restart
// fixes, for a bad option or a file or folder the flags name that is missing or cannot be made
// (TLS files, the token, the checkpoint folder, the port files); 1 otherwise.
int CannotStart(const absl::Status& why) {
  spdlog::error("cannot start: {}", why.ToString());
  return ps::ExitCodeOf(why);
}

}  // namespace

int main(int argc, char** argv) {
  ps::TuneProcessForTensorTraffic();
  ps::ParseFlags(argc, argv,
                 "One parameter-server shard: holds a slice of the model and applies the workers' "
                 "gradients.\n"
                 "  ps_server --shard_id 0 --num_shards 2 --num_workers 4 --port 5000 --mode ssp "
                 "--staleness 2 --optimizer momentum --lr 0.05");
  ps::SetUpLogging(absl::StrCat("ps-", ShardId()), absl::GetFlag(FLAGS_log_level));
  absl::StatusOr<ps::ShardServerOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    spdlog::error("bad flags: {}", options.status().ToString());
    return ps::kExitConfigurationError;
  }
  auto server = ps::ShardServer::Start(*options);
  if (!server.ok()) return CannotStart(server.status());
  const ps::ShardOptions& s = options->shard;
  spdlog::info(
      "shard {}/{} serving on {}:{} mode={} staleness={} workers={} optimizer={} lr={} "
      "version={}{}",
      s.shard_id, s.num_shards, options->host, (*server)->port(),
      ps::ConsistencyModeName(s.consistency.mode), s.consistency.staleness,
      s.consistency.num_workers, ps::OptimizerKindName(s.optimizer.kind), s.optimizer.lr,
      (*server)->shard().GetStatus().version,
      (*server)->restored().has_value() ? " (restored)" : "");
  const absl::Status port_written =
      ps::WritePortFile("--port_file", absl::GetFlag(FLAGS_port_file), (*server)->port());
  if (!port_written.ok()) return CannotStart(port_written);
  ps::ShardServer* raw = server->get();
  std::unique_ptr<ps::MetricsHttpServer> metrics;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    auto served = ps::MetricsHttpServer::Start(absl::GetFlag(FLAGS_metrics_host),
                                               absl::GetFlag(FLAGS_metrics_port),
                                               [raw] { return ps::ShardMetricsText(*raw); });
    if (!served.ok()) {
      spdlog::error("{}", served.status().ToString());
      return 1;
    }
    metrics = std::move(*served);
    const absl::Status metrics_port_written = ps::WritePortFile(
        "--metrics_port_file", absl::GetFlag(FLAGS_metrics_port_file), metrics->port());
    if (!metrics_port_written.ok()) return CannotStart(metrics_port_written);
    spdlog::info("metrics on port {}", metrics->port());
  }
  ps::ShutdownSignalWatcher watcher([raw](int signo) {
    spdlog::info("signal {}: shutting down", signo);
    raw->Shutdown().IgnoreError();  // reported below
  });
  raw->Wait();
  watcher.Stop();
  const absl::Status final_checkpoint = raw->Shutdown();
  const ps::ShardStatus status = raw->shard().GetStatus();
  spdlog::info("stopped at version {}", status.version);
  return final_checkpoint.ok() ? 0 : 1;
}
