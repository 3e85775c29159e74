#include "common/cli/log_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn or error.");
