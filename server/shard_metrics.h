#ifndef PS_SERVER_SHARD_METRICS_H_
#define PS_SERVER_SHARD_METRICS_H_

// A shard's state as Prometheus metrics (served by ps_server --metrics_port).

#include <string>

#include "server/shard_server.h"

namespace ps {

// Every metric carries the label shard="<id>". Counters end in _total.
std::string ShardMetricsText(ShardServer& server);

}  // namespace ps

#endif  // PS_SERVER_SHARD_METRICS_H_
