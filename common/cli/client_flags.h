#ifndef PS_COMMON_CLI_CLIENT_FLAGS_H_
#define PS_COMMON_CLI_CLIENT_FLAGS_H_

// Flags of the binaries that talk to a running cluster or write its weights, defined once:
// --servers (ps_worker, ps_ctl) and --weights_out (ps_worker --evaluate, ps_replay). For main()
// files only.

#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, servers);
ABSL_DECLARE_FLAG(std::string, weights_out);

#endif  // PS_COMMON_CLI_CLIENT_FLAGS_H_
