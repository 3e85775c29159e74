// ps_bench_sparse: sparse rows through the shards against a gather/scatter loop in one process.
// S ps_server processes hold one table of --rows rows per dimension D (filled first, Adagrad
// state included); this process is one worker: per measurement it draws batches of B keys (Zipf
// or uniform over the rows), deduplicates them, pulls their rows and pushes one gradient per
// row, for --seconds. The reference, measured in the same run after the worker's memory is read,
// gathers the same unique rows from a flat table of the same shape in this process and scatters
// gradients into it (one thread: the memory-bound floor a shard's hash lookups and optimizer
// add to). One JSON line per (D, keys, B):
//   {"bench":"sparse","dim":16,"keys":"zipf","batch":10000,"unique_rows":...,
//    "pull_rows_per_sec_per_shard":...,"push_rows_per_sec_per_shard":...,
//    "gather_rows_per_sec":...,"scatter_rows_per_sec":...,"ratio_vs_gather":...,
//    "ratio_vs_scatter":...}
// and per D one "fill" line: the rows, the shards' resident memory and the worker's, which must
// not grow with the table (the worker holds a batch's rows only).
//
//   ps_bench_sparse [--shards 2] [--rows 1000000] [--dims 16,64,256] [--batches 1000,10000,100000]
//                   [--keys zipf,uniform] [--seconds 1]

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_cluster.h"
#include "common/base/json_lines.h"
#include "common/base/process_tuning.h"
#include "common/base/random.h"
#include "common/cli/cli.h"
#include "spdlog/spdlog.h"
#include "worker/grpc_parameter_client.h"

ABSL_FLAG(int32_t, shards, 2, "ps_server processes.");
ABSL_FLAG(int64_t, rows, 1000000, "Rows of each table, created before the measurements.");
ABSL_FLAG(std::vector<std::string>, dims, std::vector<std::string>({"16", "64", "256"}),
          "Row dimensions, one table (and one cluster) each.");
ABSL_FLAG(std::vector<std::string>, batches, std::vector<std::string>({"1000", "10000", "100000"}),
          "Keys drawn per step (before deduplication).");
ABSL_FLAG(std::vector<std::string>, keys, std::vector<std::string>({"zipf", "uniform"}),
          "Key distributions: zipf (exponent --zipf over the rows) or uniform.");
ABSL_FLAG(double, zipf, 1.05, "Exponent of the Zipf keys.");
ABSL_FLAG(double, seconds, 1.0, "Duration of each measurement.");
ABSL_FLAG(int64_t, fill_batch, 100000, "Rows created per push while filling.");

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A step's distinct keys: `batch` draws, sorted and deduplicated. Keys are the rank's hash, so
// hot keys are not neighbours in the reference's flat table (nor in a shard's).
std::vector<uint64_t> DrawKeys(ps::Rng& rng, const std::string& kind, int64_t batch, int64_t rows,
                               double zipf) {
  std::vector<uint64_t> keys(batch);
  for (uint64_t& k : keys) {
    const int64_t rank =
        kind == "zipf" ? ps::ZipfRank(rng, rows, zipf) : static_cast<int64_t>(rng.Below(rows));
    k = ps::Mix64(static_cast<uint64_t>(rank)) % static_cast<uint64_t>(rows);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

struct Rates {
  int64_t steps = 0;
  int64_t rows = 0;  // unique rows pulled (and pushed), summed over steps
  double pull_seconds = 0, push_seconds = 0;
};

// The worker's side: pull the step's rows from the shards, push a gradient for each.
absl::StatusOr<Rates> MeasureShards(ps::GrpcParameterClient& client, int64_t* clock,
                                    const std::string& kind, int64_t batch, int64_t rows,
                                    int64_t dim, double seconds) {
  ps::Rng rng = ps::Rng::FromKeys({0x5ba45e, static_cast<uint64_t>(batch), kind.size()});
  std::vector<float> dense(static_cast<size_t>(absl::GetFlag(FLAGS_shards)));
  Rates r;
  const Clock::time_point start = Clock::now();
  while (Since(start) < seconds) {
    const std::vector<uint64_t> keys = DrawKeys(rng, kind, batch, rows, absl::GetFlag(FLAGS_zipf));
    std::vector<float> values(keys.size() * dim), grads(keys.size() * dim, 1e-3f);
    const ps::RowsToPull pull{0, keys, absl::MakeSpan(values)};
    const Clock::time_point t0 = Clock::now();
    ASSIGN_OR_RETURN(ps::PullStats pulled,
                     client.PullWithRows(*clock, /*no_wait=*/false, absl::MakeSpan(dense),
                                         absl::MakeConstSpan(&pull, 1)));
    const Clock::time_point t1 = Clock::now();
    const ps::RowsToPush push{0, keys, grads};
    std::vector<float> dense_grad(dense.size(), 0.0f);
    RETURN_IF_ERROR(
        client.PushWithRows(*clock, pulled.versions, 1, dense_grad, absl::MakeConstSpan(&push, 1))
            .status());
    r.pull_seconds += std::chrono::duration<double>(t1 - t0).count();
    r.push_seconds += Since(t1);
    r.rows += static_cast<int64_t>(keys.size());
    ++r.steps;
    ++*clock;
  }
  return r;
}

// The reference: the same draws against a flat rows x dim table in this process.
Rates MeasureGatherScatter(std::vector<float>& table, const std::string& kind, int64_t batch,
                           int64_t rows, int64_t dim, double seconds) {
  ps::Rng rng = ps::Rng::FromKeys({0x5ba45e, static_cast<uint64_t>(batch), kind.size()});
  Rates r;
  const Clock::time_point start = Clock::now();
  while (Since(start) < seconds) {
    const std::vector<uint64_t> keys = DrawKeys(rng, kind, batch, rows, absl::GetFlag(FLAGS_zipf));
    std::vector<float> values(keys.size() * dim), grads(keys.size() * dim, 1e-3f);
    const Clock::time_point t0 = Clock::now();
    for (size_t i = 0; i < keys.size(); ++i) {
      std::copy_n(table.data() + keys[i] * dim, dim, values.data() + i * dim);
    }
    const Clock::time_point t1 = Clock::now();
    for (size_t i = 0; i < keys.size(); ++i) {
      float* row = table.data() + keys[i] * dim;
      const float* g = grads.data() + i * dim;
      for (int64_t d = 0; d < dim; ++d) row[d] -= 0.01f * g[d];
    }
    r.pull_seconds += std::chrono::duration<double>(t1 - t0).count();
    r.push_seconds += Since(t1);
    r.rows += static_cast<int64_t>(keys.size());
    ++r.steps;
  }
  return r;
}

// Creates every row of the table, --fill_batch per push; returns the rows per second.
absl::StatusOr<double> Fill(ps::GrpcParameterClient& client, int64_t* clock, int64_t rows,
                            int64_t dim) {
  const int64_t step = absl::GetFlag(FLAGS_fill_batch);
  std::vector<float> dense(static_cast<size_t>(absl::GetFlag(FLAGS_shards)), 0.0f);
  std::vector<uint64_t> keys;
  std::vector<float> grads;
  const Clock::time_point start = Clock::now();
  for (int64_t first = 0; first < rows; first += step) {
    const int64_t n = std::min(step, rows - first);
    keys.resize(n);
    for (int64_t i = 0; i < n; ++i) keys[i] = static_cast<uint64_t>(first + i);
    grads.assign(n * dim, 1e-3f);
    const ps::RowsToPush push{0, keys, grads};
    RETURN_IF_ERROR(client
                        .PushWithRows(*clock, std::vector<int64_t>(dense.size(), 0), 1, dense,
                                      absl::MakeConstSpan(&push, 1))
                        .status());
    ++*clock;
  }
  return rows / Since(start);
}

std::vector<int64_t> Numbers(const std::vector<std::string>& texts, const char* flag) {
  std::vector<int64_t> out;
  for (const std::string& t : texts) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(t, &v) || v < 1) {
      std::fprintf(stderr, "--%s: '%s' is not a positive number\n", flag, t.c_str());
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

absl::Status RunDim(int64_t dim, const std::vector<int64_t>& batches) {
  const int shards = absl::GetFlag(FLAGS_shards);
  const int64_t rows = absl::GetFlag(FLAGS_rows);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  ps::bench::ShardProcesses cluster(
      shards, {"--num_workers=1", "--mode=asp", "--optimizer=sgd", "--lr=0.000001",
               "--sparse_optimizer=adagrad", "--lease_ms=600000", "--max_message_mb=1024"});
  ps::GrpcClientOptions o;
  o.servers = cluster.addresses();
  o.fingerprint = 0x5ba45e + static_cast<uint64_t>(dim);
  o.total_params = shards;
  o.tables = {ps::SparseTableSpec{"bench", dim, 0.01f}};
  o.max_message_bytes = 1024 << 20;
  ASSIGN_OR_RETURN(std::unique_ptr<ps::GrpcParameterClient> client,
                   ps::GrpcParameterClient::Create(o));
  RETURN_IF_ERROR(client->Register(0, absl::Seconds(30)).status());
  RETURN_IF_ERROR(client->Init(std::vector<float>(shards, 0.0f)));
  int64_t clock = 0;
  const double idle_rss = cluster.RssMib();
  ASSIGN_OR_RETURN(const double fill_rate, Fill(*client, &clock, rows, dim));
  ASSIGN_OR_RETURN(const std::vector<ps::ShardReport> reports, client->Status());
  int64_t held = 0, bytes = 0;
  for (const ps::ShardReport& r : reports) {
    held += r.tables.at(0).rows;
    bytes += r.tables.at(0).bytes;
  }
  std::vector<Rates> remote;
  for (const std::string& kind : absl::GetFlag(FLAGS_keys)) {
    for (int64_t batch : batches) {
      ASSIGN_OR_RETURN(Rates r, MeasureShards(*client, &clock, kind, batch, rows, dim, seconds));
      remote.push_back(r);
    }
  }
  // The worker's memory, read before the reference's table exists in this process.
  const double worker_rss = ps::bench::ProcessMemoryMib(getpid());
  const double worker_peak = ps::bench::ProcessMemoryMib(getpid(), "VmHWM");
  std::printf("%s\n", ps::JsonObject()
                          .Add("bench", "sparse_fill")
                          .Add("dim", dim)
                          .Add("shards", shards)
                          .Add("rows", held)
                          .Add("table_bytes", bytes)
                          .Add("fill_rows_per_sec", fill_rate)
                          .Add("server_rss_idle_mib", idle_rss)
                          .Add("server_rss_mib", cluster.RssMib())
                          .Add("worker_rss_mib", worker_rss)
                          .Add("worker_peak_rss_mib", worker_peak)
                          .str()
                          .c_str());
  std::fflush(stdout);
  if (held != rows) {
    return absl::InternalError(absl::StrCat("the shards hold ", held, " rows, not ", rows));
  }
  std::vector<float> table(static_cast<size_t>(rows * dim), 0.01f);
  size_t at = 0;
  for (const std::string& kind : absl::GetFlag(FLAGS_keys)) {
    for (int64_t batch : batches) {
      const Rates& r = remote[at++];
      const Rates g = MeasureGatherScatter(table, kind, batch, rows, dim, seconds);
      const double pull_rate = r.rows / r.pull_seconds / shards;
      const double push_rate = r.rows / r.push_seconds / shards;
      const double gather_rate = g.rows / g.pull_seconds;
      const double scatter_rate = g.rows / g.push_seconds;
      std::printf("%s\n", ps::JsonObject()
                              .Add("bench", "sparse")
                              .Add("dim", dim)
                              .Add("shards", shards)
                              .Add("rows", rows)
                              .Add("keys", kind)
                              .Add("batch", batch)
                              .Add("unique_rows", static_cast<double>(r.rows) / r.steps)
                              .Add("steps", r.steps)
                              .Add("pull_rows_per_sec_per_shard", pull_rate)
                              .Add("push_rows_per_sec_per_shard", push_rate)
                              .Add("gather_rows_per_sec", gather_rate)
                              .Add("scatter_rows_per_sec", scatter_rate)
                              .Add("ratio_vs_gather", pull_rate / gather_rate)
                              .Add("ratio_vs_scatter", push_rate / scatter_rate)
                              .str()
                              .c_str());
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  ps::TuneProcessForTensorTraffic();
  ps::ParseCommandLine(argc, argv,
                       "Sparse rows through the shards against a gather/scatter loop.\n"
                       "  ps_bench_sparse [--shards 2] [--rows 1000000] [--dims 16,64,256]");
  spdlog::set_level(spdlog::level::warn);
  if (absl::GetFlag(FLAGS_shards) < 1 || absl::GetFlag(FLAGS_rows) < 1 ||
      absl::GetFlag(FLAGS_seconds) <= 0 || absl::GetFlag(FLAGS_fill_batch) < 1 ||
      !(absl::GetFlag(FLAGS_zipf) > 0) || absl::GetFlag(FLAGS_zipf) == 1.0) {
    std::fprintf(stderr,
                 "--shards, --rows and --fill_batch must be >= 1, --seconds > 0, --zipf > 0 "
                 "and not 1\n");
    return 2;
  }
  for (const std::string& kind : absl::GetFlag(FLAGS_keys)) {
    if (kind != "zipf" && kind != "uniform") {
      std::fprintf(stderr, "--keys: '%s' is not zipf or uniform\n", kind.c_str());
      return 2;
    }
  }
  const std::vector<int64_t> batches = Numbers(absl::GetFlag(FLAGS_batches), "batches");
  for (int64_t dim : Numbers(absl::GetFlag(FLAGS_dims), "dims")) {
    const absl::Status s = RunDim(dim, batches);
    if (!s.ok()) {
      std::fprintf(stderr, "dim %lld: %s\n", static_cast<long long>(dim), s.ToString().c_str());
      return 1;
    }
  }
  return 0;
}
