#ifndef PS_WORKER_PYTHON_PY_CONVERT_H_
#define PS_WORKER_PYTHON_PY_CONVERT_H_

// A Python worker's configuration, and the client's results as Python dicts.

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "worker/grpc_parameter_client.h"
#include "worker/work_account.h"

namespace ps {

namespace py = pybind11;

// What a Python worker is told about the cluster and how to reach it.
struct WorkerConfig {
  std::vector<std::string> servers;
  int rank = 0;
  int num_workers = 0;  // 0: take the shards' word for it
  std::string token_file, tls_ca, tls_cert, tls_key, tls_server_name;
  bool allow_plaintext_token = false;
  bool shared_memory = true;
  bool local_calls = true;  // with shared memory: calls over the shards' local sockets
  double register_timeout_s = 120;
  double call_timeout_s = 30;
  double pull_timeout_s = 600;
  double retry_s = 60;  // 0: retry UNAVAILABLE forever
  int max_rejoins = 10;
};

// The client's options for `c`; its security settings read (ps_train.PsError when they are bad).
GrpcClientOptions ClientOptions(const WorkerConfig& c);
// INVALID_ARGUMENT (thrown) for no servers or a rank outside the job.
void CheckConfig(const WorkerConfig& c);

// A push's stats as step() reports them.
py::dict PushStatsDict(const PushStats& s);
// Adds `part`'s counts to `total` (the largest staleness of the two).
void AddPushStats(const PushStats& part, PushStats* total);
// The job's work account as finish() returns it.
py::dict WorkAccountDict(const WorkAccount& work);
// The shards' reports as JSON objects, one per shard (ps_ctl status --json's lines).
std::vector<std::string> ReportsJson(const std::vector<ShardReport>& reports,
                                     const std::vector<std::string>& servers);

}  // namespace ps

#endif  // PS_WORKER_PYTHON_PY_CONVERT_H_
