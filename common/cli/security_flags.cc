#include "common/cli/security_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "common/cli/token_flags.h"

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain: the server's identity, or the client's for mutual TLS.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle. Client: turns TLS on and verifies the servers. Server: requires and "
          "verifies client certificates (mutual TLS).");
ABSL_FLAG(std::string, tls_server_name, "",
          "Client: the name the server certificate must carry, when it differs from the host in "
          "--servers.");

namespace ps {

SecurityOptions SecurityOptionsFromFlags() {
  SecurityOptions o;
  o.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  o.tls_key = absl::GetFlag(FLAGS_tls_key);
  o.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  o.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  o.token_file = absl::GetFlag(FLAGS_token_file);
  o.allow_plaintext_token = absl::GetFlag(FLAGS_allow_plaintext_token);
  return o;
}

}  // namespace ps
