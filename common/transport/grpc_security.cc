#include "common/transport/grpc_security.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/security/server_credentials.h"

namespace ps {

namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--", flag, " ", path, ": cannot read"));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", path, ": not a PEM file"));
  }
  return text;
}

absl::Status CheckPair(const SecurityOptions& o) {
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  return absl::OkStatus();
}

// The token of --token_file ("" without one). Without TLS (`tls` false) a token is refused
// unless --allow_plaintext_token: it would travel in clear text; `tls_flags` names the flags
// that would encrypt it on this side.
absl::StatusOr<std::string> TokenOf(const SecurityOptions& o, bool tls, const char* tls_flags) {
  if (o.token_file.empty()) return std::string();
  ASSIGN_OR_RETURN(std::string token, ReadTokenFile(o.token_file));
  if (!tls && !o.allow_plaintext_token) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--token_file without ", tls_flags, " would send the token in clear text: add ", tls_flags,
        ", or --allow_plaintext_token on a trusted network"));
  }
  return token;
}

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--token_file ", path, ": cannot read"));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(ss.str()));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--token_file ", path, " is empty"));
  }
  for (char c : token) {
    // gRPC metadata values must be printable ASCII.
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token_file ", path, ": the token must be printable ASCII, one word"));
    }
  }
  return token;
}

absl::StatusOr<ServerSecurity> MakeServerSecurity(const SecurityOptions& o) {
  RETURN_IF_ERROR(CheckPair(o));
  if (!o.tls_ca.empty() && o.tls_cert.empty()) {
    return absl::InvalidArgumentError("--tls_ca on a server needs --tls_cert and --tls_key");
  }
  ServerSecurity out;
  ASSIGN_OR_RETURN(out.token, TokenOf(o, !o.tls_cert.empty(), "--tls_cert/--tls_key"));
  if (o.tls_cert.empty()) {
    out.credentials = grpc::InsecureServerCredentials();
    return out;
  }
  ASSIGN_OR_RETURN(const std::string cert, ReadPem(o.tls_cert, "tls_cert"));
  ASSIGN_OR_RETURN(const std::string key, ReadPem(o.tls_key, "tls_key"));
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  ssl.pem_key_cert_pairs.push_back({key, cert});
  if (!o.tls_ca.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(o.tls_ca, "tls_ca"));
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    out.mutual_tls = true;
  }
  out.credentials = grpc::SslServerCredentials(ssl);
  out.tls = true;
  return out;
}

absl::StatusOr<ClientSecurity> MakeClientSecurity(const SecurityOptions& o) {
  RETURN_IF_ERROR(CheckPair(o));
  if (o.tls_ca.empty() && !o.tls_cert.empty()) {
    return absl::InvalidArgumentError("a client certificate needs --tls_ca (TLS)");
  }
  ClientSecurity out;
  ASSIGN_OR_RETURN(out.token, TokenOf(o, !o.tls_ca.empty(), "--tls_ca"));
  if (o.tls_ca.empty()) {
    out.credentials = grpc::InsecureChannelCredentials();
    return out;
  }
  grpc::SslCredentialsOptions ssl;
  ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(o.tls_ca, "tls_ca"));
  if (!o.tls_cert.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadPem(o.tls_cert, "tls_cert"));
    ASSIGN_OR_RETURN(ssl.pem_private_key, ReadPem(o.tls_key, "tls_key"));
  }
  out.credentials = grpc::SslCredentials(ssl);
  out.server_name_override = o.tls_server_name;
  return out;
}

grpc::ChannelArguments ClientChannelArguments(int max_message_bytes,
                                              const ClientSecurity& security) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_message_bytes);
  args.SetMaxSendMessageSize(max_message_bytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Each client's channels get connections of their own: gRPC would otherwise share one TCP
  // connection among all clients of a process that target the same shard (in-process workers
  // of tests and benchmarks), serialising them on one HTTP/2 connection.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // A shard that comes back is found within about a second: gRPC's default reconnect backoff
  // grows to 120 s, so after a long outage the channel would stay in TRANSIENT_FAILURE (every
  // call failing at once) for minutes after the shard is up again. Its name is looked up again
  // as often: a container's name resolves only while it runs, and gRPC would otherwise wait 30 s
  // between lookups.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kReconnectBackoffMs);
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, kReconnectBackoffMs);
  // Keepalive pings go out on schedule while a call waits for its answer (gRPC would otherwise
  // hold them back for 5 minutes once no data arrives), so a shard that vanished without closing
  // its connections is noticed within keepalive time + timeout.
  args.SetInt(GRPC_ARG_HTTP2_MIN_SENT_PING_INTERVAL_WITHOUT_DATA_MS, kKeepaliveTimeMs);
  if (!security.server_name_override.empty()) {
    args.SetSslTargetNameOverride(security.server_name_override);
  }
  return args;
}

void ConfigureServerBuilder(int max_message_bytes, grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(max_message_bytes);
  builder->SetMaxSendMessageSize(max_message_bytes);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                              kServerMinPingIntervalMs);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 2 * kKeepaliveTimeMs);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
}

size_t ShardReceiveQuotaBytes(int64_t slice_bytes) {
  return std::max<size_t>(size_t{32} << 20,
                          16 * static_cast<size_t>(std::max<int64_t>(0, slice_bytes)));
}

}  // namespace ps
