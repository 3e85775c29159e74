#ifndef PS_COMMON_TRANSPORT_GRPC_SECURITY_H_
#define PS_COMMON_TRANSPORT_GRPC_SECURITY_H_

// How servers and clients of the cluster set up their gRPC transport, in one place so that both
// sides agree: TLS credentials (server certificate, optional client certificates: mTLS), the
// cluster token, message-size limits and keepalive.
//
// Keepalive: clients ping an idle connection every kKeepaliveTimeMs so a dead peer (a host that
// vanished without a FIN) is noticed; servers accept pings as often as every
// kServerMinPingIntervalMs. The server's minimum is below the client's interval, so a server never
// answers GOAWAY "too_many_pings".

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/channel_arguments.h"

namespace ps {

inline constexpr char kAuthorizationHeader[] = "authorization";
inline constexpr char kBearerPrefix[] = "Bearer ";

inline constexpr int kKeepaliveTimeMs = 20000;
inline constexpr int kKeepaliveTimeoutMs = 10000;
inline constexpr int kServerMinPingIntervalMs = 10000;
// Clients try to reconnect to a shard that went away every this many milliseconds, no slower.
inline constexpr int kReconnectBackoffMs = 1000;
static_assert(kServerMinPingIntervalMs < kKeepaliveTimeMs,
              "servers must accept the clients' keepalive pings");

struct SecurityOptions {
  // Server: its certificate chain and key (PEM); with tls_ca, clients must present a certificate
  // signed by that CA (mTLS). Client: tls_ca verifies the server; tls_cert/tls_key, if set, are
  // the client's certificate for mTLS. All empty: plaintext.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  std::string tls_server_name;  // client: the name to verify in the server certificate
  std::string token_file;       // the cluster token, one line; empty: no token
  // A token over plaintext can be read by anyone on the path: refused unless this is set.
  bool allow_plaintext_token = false;
};

// The token from `path`, surrounding whitespace removed. INVALID_ARGUMENT when it is empty or not
// printable ASCII, NOT_FOUND when the file cannot be read.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// Reads the files the options name and checks that they make sense together (a certificate needs
// its key; a token needs TLS unless allowed). Errors name the flag and file.
struct ServerSecurity {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  std::string token;  // empty: none
  bool tls = false;
  bool mutual_tls = false;
};
absl::StatusOr<ServerSecurity> MakeServerSecurity(const SecurityOptions& options);

struct ClientSecurity {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string token;  // sent with every call when set
  std::string server_name_override;
};
absl::StatusOr<ClientSecurity> MakeClientSecurity(const SecurityOptions& options);

// Channel arguments every client of the cluster uses: message limits and keepalive.
grpc::ChannelArguments ClientChannelArguments(int max_message_bytes,
                                              const ClientSecurity& security);
// Builder settings every server uses: message limits and keepalive policy.
void ConfigureServerBuilder(int max_message_bytes, grpc::ServerBuilder* builder);

// How much memory a shard lets its connections hold (a gRPC ResourceQuota): a received request
// stays in gRPC's buffers until its handler has run, so without a bound a shard's memory grows
// with the number of workers times the slice when many push at once. Past the quota gRPC stops
// reading (TCP backpressure) instead of buffering more. 16 slices and at least 32 MiB: enough
// that one worker's large messages are never throttled (measured with ps_bench_transport; a
// quota of 4 messages halved 16 MiB pushes), small enough that ps_bench_scale's server memory
// stays flat from 16 to 64 workers. `slice_bytes` is the shard's slice, or the largest message
// before the shard knows its slice.
size_t ShardReceiveQuotaBytes(int64_t slice_bytes);

}  // namespace ps

#endif  // PS_COMMON_TRANSPORT_GRPC_SECURITY_H_
