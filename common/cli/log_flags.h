#ifndef PS_COMMON_CLI_LOG_FLAGS_H_
#define PS_COMMON_CLI_LOG_FLAGS_H_

// --log_level, defined once for ps_server, ps_worker and ps_launch (which passes it on to its
// children). For main() files only.

#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, log_level);

#endif  // PS_COMMON_CLI_LOG_FLAGS_H_
