#ifndef PS_COMMON_BASE_LOGGING_H_
#define PS_COMMON_BASE_LOGGING_H_

// Process-wide logging setup: spdlog to stderr with a per-process prefix such as "[ps-1]" or
// "[worker-3]", so interleaved logs of a local cluster stay readable. Call once from main().

#include <string>

namespace ps {

// `level` is one of trace, debug, info, warn, error (unknown names mean info).
void SetUpLogging(const std::string& process_name, const std::string& level);

}  // namespace ps

#endif  // PS_COMMON_BASE_LOGGING_H_
