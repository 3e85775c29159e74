#include "common/cli/token_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, token_file, "",
          "File holding the cluster token; every call must carry it (UNAUTHENTICATED otherwise).");
ABSL_FLAG(bool, allow_plaintext_token, false,
          "Allow --token_file without TLS (the token then travels in clear text).");
