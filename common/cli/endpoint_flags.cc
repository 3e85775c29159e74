#include "common/cli/endpoint_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(int32_t, max_message_mb, 256, "Largest gRPC message accepted or sent, in MiB.");
ABSL_FLAG(int32_t, metrics_port, -1,
          "Serve Prometheus metrics at http://<--metrics_host>:PORT/metrics (0: a free port, "
          "see --metrics_port_file; -1: off).");
ABSL_FLAG(std::string, metrics_host, "0.0.0.0", "Address of the /metrics endpoint.");
ABSL_FLAG(std::string, metrics_port_file, "", "Write the /metrics port to this file.");
