#ifndef PS_WORKER_SHARD_REPORT_JSON_H_
#define PS_WORKER_SHARD_REPORT_JSON_H_

// One shard's report as one JSON object: what `ps_ctl status --json` prints per shard and what
// the Python package's status() returns, so that the two never drift apart.

#include <string>

#include "worker/parameter_client.h"

namespace ps {

// `server` is the shard's address as the caller named it ("host:port").
std::string ShardReportJson(const ShardReport& report, const std::string& server);

}  // namespace ps

#endif  // PS_WORKER_SHARD_REPORT_JSON_H_
