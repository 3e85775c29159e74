#include "server/shard_server.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "spdlog/spdlog.h"

namespace ps {

namespace {

uint64_t RandomIncarnation() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (uint64_t{rd()} << 32) ^ rd();
  return v;
}

// Restores checkpoint `version` of `dir` into `shard` (with its full base, if incremental), or
// with version -1 the newest one it can take; what was restored, nullopt for an empty folder
// (version -1 only). A named version must be there intact: NOT_FOUND or DATA_LOSS otherwise.
// Once it is restored, the checkpoints above it are removed: the run went back from them.
absl::StatusOr<std::optional<CheckpointInfo>> RestoreCheckpoint(const CheckpointDir& dir,
                                                                int64_t version, Shard& shard) {
  int64_t base = -1;  // of the one restored, if incremental
  auto restore = [&dir, &shard, &base](const CheckpointDir::Loaded& candidate) {
    base = -1;
    absl::Status restored = shard.RestoreSnapshot(candidate.payload, [&dir, &base](int64_t v) {
      base = v;
      return dir.Load(static_cast<uint64_t>(v));
    });
    if (restored.ok()) return restored;
    return absl::Status(restored.code(),
                        absl::StrCat("restoring ", candidate.info.path, ": ", restored.message()));
  };
  absl::StatusOr<CheckpointDir::Loaded> loaded;
  if (version >= 0) {
    const uint64_t sequence = static_cast<uint64_t>(version);
    std::optional<CheckpointInfo> found = dir.Find(sequence);
    if (!found.has_value()) {
      return absl::NotFoundError(absl::StrCat("no checkpoint ", version, " in ", dir.dir()));
    }
    CheckpointDir::Loaded exact{*std::move(found), ""};
    ASSIGN_OR_RETURN(exact.payload, dir.Load(sequence));
    RETURN_IF_ERROR(restore(exact));
    ASSIGN_OR_RETURN(const std::vector<std::string> removed,
                     dir.RemoveNewerThan(exact.info.sequence));
    for (const std::string& path : removed) {
      spdlog::info("removed {}: newer than {}", path, version);
    }
    loaded = std::move(exact);
  } else {
    std::vector<std::string> skipped;
    loaded = dir.LoadNewest(&skipped, restore);
    for (const std::string& why : skipped) spdlog::warn("skipped checkpoint {}", why);
    if (loaded.status().code() == absl::StatusCode::kNotFound) return std::nullopt;
    if (!loaded.ok()) return loaded.status();
  }
  spdlog::info(
      "restored {} (version {}{})", loaded->info.path, loaded->info.sequence,
      base >= 0 ? absl::StrCat(", incremental over the full one of ", base) : std::string());
  return loaded->info;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShardServer>> ShardServer::Start(const ShardServerOptions& options) {
  std::unique_ptr<ShardServer> s(new ShardServer());
  s->options_ = options;
  ASSIGN_OR_RETURN(ServerSecurity security, MakeServerSecurity(options.security));
  if (options.checkpoint_every_updates < 0) {
    return absl::InvalidArgumentError("checkpoint_every_updates must be >= 0");
  }
  if (options.restore_version >= 0 && options.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError("restore_version needs a checkpoint folder");
  }
  ShardOptions shard_options = options.shard;
  shard_options.incarnation = RandomIncarnation();
  if (!options.record_updates_path.empty()) {
    s->record_ = std::fopen(options.record_updates_path.c_str(), "a");
    if (s->record_ == nullptr) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot write --record_updates ", options.record_updates_path));
    }
    std::FILE* f = s->record_;
    shard_options.on_apply = [f](const AppliedUpdate& u) {
      std::fprintf(f, "%lld %d %lld %lld %lld\n", static_cast<long long>(u.version_before), u.rank,
                   static_cast<long long>(u.clock), static_cast<long long>(u.base_version),
                   static_cast<long long>(u.staleness));
    };
  }
  if (!options.checkpoint_dir.empty()) {
    ASSIGN_OR_RETURN(CheckpointDir dir,
                     CheckpointDir::Open(options.checkpoint_dir, options.checkpoint_keep));
    s->checkpoints_.emplace(std::move(dir));
    shard_options.snapshot_every_updates = options.checkpoint_every_updates;
    ShardServer* raw = s.get();
    shard_options.on_snapshot = [raw](Shard::Snapshot snapshot) {
      std::lock_guard<std::mutex> lock(raw->writer_mu_);
      raw->queue_.push_back(std::move(snapshot));
      // A disk slower than the updates would otherwise grow the queue (memory) and the distance
      // between the newest checkpoint on disk and the shard (the work a restore loses).
      const int dropped = DropSupersededSnapshots(&raw->queue_);
      if (dropped > 0 && raw->checkpoints_superseded_.fetch_add(dropped) == 0) {
        spdlog::warn(
            "checkpoint writes fall behind the updates: the newest queued checkpoint (version {}) "
            "supersedes {} older ones, which are not written (counted by "
            "ps_shard_checkpoints_superseded_total)",
            raw->queue_.back().version, dropped);
      }
      raw->writer_cv_.notify_all();
    };
  }
  ASSIGN_OR_RETURN(s->shard_, Shard::Create(shard_options));
  if (s->checkpoints_.has_value()) {
    ASSIGN_OR_RETURN(s->restored_,
                     RestoreCheckpoint(*s->checkpoints_, options.restore_version, *s->shard_));
    if (s->restored_.has_value()) {
      s->last_written_version_ = static_cast<int64_t>(s->restored_->sequence);
    }
    s->writer_ = std::thread([raw = s.get()] { raw->WriterLoop(); });
  }

  ServiceOptions service_options;
  service_options.max_pull_wait = options.max_pull_wait;
  service_options.token = security.token;
  service_options.drop_push_reply_every = options.drop_push_reply_every;
  service_options.accept_shared_memory = options.accept_shared_memory;
  service_options.on_initialized = [raw = s.get()] { raw->SetParametersServing(true); };
  s->service_ = std::make_unique<ParameterServerService>(*s->shard_, service_options);
  if (s->restored_.has_value()) s->service_->set_checkpoint_version(s->last_written_version_);
  if (options.accept_shared_memory && options.local_calls) {
    // Without it the workers on this host still move their payloads through shared memory, with
    // the calls over gRPC.
    absl::StatusOr<std::unique_ptr<LocalCallServer>> local = LocalCallServer::Start(*s->service_);
    if (local.ok()) {
      s->local_calls_ = std::move(*local);
      s->service_->set_local_socket(s->local_calls_->name());
    } else {
      spdlog::warn("no local calls, workers on this host call over gRPC: {}",
                   local.status().ToString());
    }
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(
      options.host.find(':') != std::string::npos ? "[" + options.host + "]" : options.host, ":",
      options.port);
  builder.AddListeningPort(address, security.credentials, &s->port_);
  ConfigureServerBuilder(options.max_message_bytes, &builder);
  s->receive_quota_.Resize(ShardReceiveQuotaBytes(options.max_message_bytes));
  builder.SetResourceQuota(s->receive_quota_);
  builder.RegisterService(s->service_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  if (options.health_port >= 0) {
    grpc::ServerBuilder health_builder;
    const std::string health_address = absl::StrCat(
        options.host.find(':') != std::string::npos ? "[" + options.host + "]" : options.host, ":",
        options.health_port);
    health_builder.AddListeningPort(health_address, grpc::InsecureServerCredentials(),
                                    &s->health_port_);
    s->unimplemented_ = std::make_unique<ps::v1::ParameterServer::Service>();
    health_builder.RegisterService(s->unimplemented_.get());
    s->health_server_ = health_builder.BuildAndStart();
    if (s->health_server_ == nullptr || s->health_port_ == 0) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", health_address));
    }
  }
  for (grpc::Server* server : {s->server_.get(), s->health_server_.get()}) {
    if (server != nullptr && server->GetHealthCheckService() != nullptr) {
      server->GetHealthCheckService()->SetServingStatus("", true);
    }
  }
  s->SetParametersServing(s->shard_->GetStatus().initialized);
  return s;
}

void ShardServer::SetParametersServing(bool serving) {
  if (serving) {
    receive_quota_.Resize(
        ShardReceiveQuotaBytes(shard_->range().size() * static_cast<int64_t>(sizeof(float))));
  }
  std::lock_guard<std::mutex> lock(health_mu_);
  if (health_final_) return;
  for (grpc::Server* server : {server_.get(), health_server_.get()}) {
    if (server != nullptr && server->GetHealthCheckService() != nullptr) {
      server->GetHealthCheckService()->SetServingStatus(kParameterServiceName, serving);
    }
  }
}

absl::Status ShardServer::WriteCheckpoint(const Shard::Snapshot& snapshot) {
  absl::StatusOr<CheckpointInfo> info =
      checkpoints_->Write(static_cast<uint64_t>(snapshot.version), snapshot.payload,
                          snapshot.base_version >= 0 ? static_cast<uint64_t>(snapshot.base_version)
                                                     : CheckpointDir::kNoBase);
  if (!info.ok()) {
    // The incremental checkpoints to come would build on a full one that is not there.
    if (snapshot.base_version < 0) shard_->RestartSnapshotChain();
    return info.status();
  }
  service_->set_checkpoint_version(snapshot.version);
  spdlog::debug("checkpoint {} written ({} bytes{})", info->path, snapshot.payload.size(),
                snapshot.base_version >= 0
                    ? absl::StrCat(", incremental over ", snapshot.base_version)
                    : std::string());
  return absl::OkStatus();
}

void ShardServer::WriterLoop() {
  const bool timed = options_.checkpoint_interval > absl::ZeroDuration() &&
                     options_.shard.consistency.mode != ConsistencyMode::kBsp;
  const auto interval =
      absl::ToChronoMilliseconds(timed ? options_.checkpoint_interval : absl::Hours(24 * 365));
  std::unique_lock<std::mutex> lock(writer_mu_);
  while (true) {
    const bool woke =
        writer_cv_.wait_for(lock, interval, [this] { return writer_stop_ || !queue_.empty(); });
    if (writer_stop_) return;  // Shutdown writes the final checkpoint itself
    Shard::Snapshot snapshot;
    if (woke) {
      snapshot = std::move(queue_.front());
      queue_.pop_front();
    } else {
      // The periodic, time-based checkpoint (SSP/ASP): only when something changed.
      // Checked before encoding: a chain snapshot that is not written would break the chain.
      if (shard_->GetStatus().version == last_written_version_) continue;
      lock.unlock();
      snapshot = shard_->EncodeSnapshot(Shard::SnapshotUse::kChain);
      lock.lock();
    }
    lock.unlock();
    absl::Status s = WriteCheckpoint(snapshot);
    lock.lock();
    if (s.ok()) {
      last_written_version_ = snapshot.version;
    } else {
      spdlog::error("checkpoint at version {} failed: {}", snapshot.version, s.ToString());
    }
  }
}

ShardServer::~ShardServer() {
  Shutdown().IgnoreError();
  Wait();
  shard_.reset();  // no more updates can be recorded
  if (record_ != nullptr) std::fclose(record_);
}

absl::Status ShardServer::Shutdown(absl::Duration grace) {
  std::lock_guard<std::mutex> once(shutdown_mu_);
  if (shut_down_) return shutdown_status_;
  shut_down_ = true;
  {
    std::lock_guard<std::mutex> lock(health_mu_);
    health_final_ = true;
    for (grpc::Server* server : {server_.get(), health_server_.get()}) {
      if (server != nullptr && server->GetHealthCheckService() != nullptr) {
        server->GetHealthCheckService()->Shutdown();  // NOT_SERVING for every service, for good
      }
    }
  }
  // From here on the shard accepts no update, so the final snapshot holds every acknowledged one.
  if (shard_ != nullptr) shard_->Shutdown();
  if (writer_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(writer_mu_);
      writer_stop_ = true;
      // Older than the final snapshot; when a full one is among them, the final one must be
      // full too (its increments would build on a file never written).
      for (const Shard::Snapshot& dropped : queue_) {
        if (dropped.base_version < 0) shard_->RestartSnapshotChain();
      }
      queue_.clear();
    }
    writer_cv_.notify_all();
    writer_.join();
    const Shard::Snapshot final_snapshot = shard_->EncodeSnapshot(Shard::SnapshotUse::kChain);
    shutdown_status_ = WriteCheckpoint(final_snapshot);
    if (shutdown_status_.ok()) {
      spdlog::info("final checkpoint at version {}", final_snapshot.version);
    } else {
      spdlog::error("final checkpoint failed: {}", shutdown_status_.ToString());
    }
  }
  // The waiting pulls have failed (UNAVAILABLE) and been answered; the workers find the next
  // shard over gRPC. grpc::Server::Shutdown is idempotent and thread-safe.
  if (local_calls_ != nullptr) local_calls_->Shutdown();
  if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  if (health_server_ != nullptr) health_server_->Shutdown(absl::ToChronoTime(absl::Now()));
  return shutdown_status_;
}

void ShardServer::Wait() {
  if (server_ != nullptr) server_->Wait();
  if (health_server_ != nullptr) health_server_->Wait();
}

}  // namespace ps
