#include "server/shard_server.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace ps {

absl::StatusOr<std::unique_ptr<ShardServer>> ShardServer::Start(const ShardServerOptions& options) {
  std::unique_ptr<ShardServer> s(new ShardServer());
  ShardOptions shard_options = options.shard;
  if (!options.record_updates_path.empty()) {
    s->record_ = std::fopen(options.record_updates_path.c_str(), "w");
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
  ASSIGN_OR_RETURN(s->shard_, Shard::Create(shard_options));
  s->service_ = std::make_unique<ParameterServerService>(*s->shard_, options.max_pull_wait);
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(
      options.host.find(':') != std::string::npos ? "[" + options.host + "]" : options.host, ":",
      options.port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &s->port_);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  builder.RegisterService(s->service_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  return s;
}

ShardServer::~ShardServer() {
  Shutdown();
  if (server_ != nullptr) server_->Wait();
  shard_.reset();  // no more updates can be recorded
  if (record_ != nullptr) std::fclose(record_);
}

void ShardServer::Shutdown(absl::Duration grace) {
  if (shard_ != nullptr) shard_->Shutdown();
  // grpc::Server::Shutdown is idempotent and thread-safe.
  if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
}

void ShardServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

}  // namespace ps
