#ifndef PS_COMMON_CLI_TOKEN_FLAGS_H_
#define PS_COMMON_CLI_TOKEN_FLAGS_H_

// The cluster token's flags, defined once for ps_server, ps_worker and ps_ctl (through
// security_flags) and ps_launch (which passes them on). For main() files only.

#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, token_file);
ABSL_DECLARE_FLAG(bool, allow_plaintext_token);

#endif  // PS_COMMON_CLI_TOKEN_FLAGS_H_
