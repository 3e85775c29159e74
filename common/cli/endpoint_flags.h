#ifndef PS_COMMON_CLI_ENDPOINT_FLAGS_H_
#define PS_COMMON_CLI_ENDPOINT_FLAGS_H_

// What a shard and a worker process expose, defined once for ps_server and ps_worker: the
// largest gRPC message (--max_message_mb) and the Prometheus /metrics endpoint (--metrics_port,
// --metrics_host, --metrics_port_file). For main() files only.

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(int32_t, max_message_mb);
ABSL_DECLARE_FLAG(int32_t, metrics_port);
ABSL_DECLARE_FLAG(std::string, metrics_host);
ABSL_DECLARE_FLAG(std::string, metrics_port_file);

#endif  // PS_COMMON_CLI_ENDPOINT_FLAGS_H_
