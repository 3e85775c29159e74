// ps_bench_scale: many light worker clients against a few shards. S ps_server processes (real
// processes, so their memory can be read from /proc) and W client threads in this process, each
// its own GrpcParameterClient (its own channels), pulling and pushing a small model in a loop
// under ASP (or SSP/BSP with --mode) for --seconds. One JSON line per (model size, workers):
//   {"bench":"scale","mode":"asp","workers":64,"shards":4,"params":262144,"pushes_per_sec":...,
//    "pull_p50_ms":...,"pull_p99_ms":...,"errors":0,"server_rss_mib":...,"model_mib":...}
// server_rss_mib sums the shards' resident memory after the run; comparing lines shows whether
// it grows with the model or with workers x model.
//
//   ps_bench_scale [--workers 16,64] [--params 262144,1048576] [--shards 4] [--seconds 10]

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_cluster.h"
#include "common/base/consistency_mode.h"
#include "common/base/json_lines.h"
#include "common/base/process_tuning.h"
#include "common/cli/cli.h"
#include "spdlog/spdlog.h"
#include "worker/grpc_parameter_client.h"

ABSL_FLAG(std::vector<std::string>, workers, std::vector<std::string>({"16", "64"}),
          "Numbers of worker clients.");
ABSL_FLAG(std::vector<std::string>, params, std::vector<std::string>({"262144", "1048576"}),
          "Model sizes in float32 parameters.");
ABSL_FLAG(int32_t, shards, 4, "ps_server processes.");
ABSL_FLAG(std::string, mode, "asp", "Consistency mode: bsp, ssp or asp.");
ABSL_FLAG(double, seconds, 10, "Duration of each measurement (ASP).");
ABSL_FLAG(int32_t, steps, 0,
          "Steps per worker instead of --seconds (needed under BSP and SSP, where a worker that "
          "stopped on time would hold the others' pulls).");

namespace {

using Clock = std::chrono::steady_clock;

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p * v.size()));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

}  // namespace

int main(int argc, char** argv) {
  ps::TuneProcessForTensorTraffic();
  ps::ParseCommandLine(
      argc, argv,
      "Many light workers against a few shards: pushes/s, pull latency, server "
      "memory.\n  ps_bench_scale [--workers 16,64] [--params 262144] [--shards 4]");
  spdlog::set_level(spdlog::level::warn);
  const int shards = absl::GetFlag(FLAGS_shards);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const int steps = absl::GetFlag(FLAGS_steps);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  // Every flag is checked before the first shard starts, each refusal naming its flag.
  const auto refuse = [](const std::string& why) {
    std::fprintf(stderr, "ps_bench_scale: %s\n", why.c_str());
    return 2;
  };
  if (!ps::ParseConsistencyMode(mode).ok()) {
    return refuse("--mode: '" + mode + "' is not bsp, ssp or asp");
  }
  if (shards < 1) return refuse("--shards must be >= 1");
  if (!(seconds > 0)) return refuse("--seconds must be > 0");
  if (steps < 0 || (mode != "asp" && steps == 0)) {
    return refuse("--steps must be > 0 under --mode " + mode + " (>= 0 under asp)");
  }
  std::vector<int64_t> sizes;
  for (const std::string& text : absl::GetFlag(FLAGS_params)) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(text, &n) || n < shards) {
      return refuse("--params: '" + text + "' is not a count of at least --shards (" +
                    std::to_string(shards) + ")");
    }
    sizes.push_back(n);
  }
  std::vector<int> worker_counts;
  for (const std::string& text : absl::GetFlag(FLAGS_workers)) {
    int workers = 0;
    if (!absl::SimpleAtoi(text, &workers) || workers < 1) {
      return refuse("--workers: '" + text + "' is not a count >= 1");
    }
    worker_counts.push_back(workers);
  }
  for (const int64_t n : sizes) {
    for (const int workers : worker_counts) {
      ps::bench::ShardProcesses cluster(
          shards, {absl::StrCat("--num_workers=", workers), "--mode=" + mode,
                   absl::StrCat("--staleness=", mode == "ssp" ? 2 : 0), "--optimizer=sgd",
                   "--lr=0.000001", "--lease_ms=600000"});
      const double idle_rss = cluster.RssMib();
      std::vector<std::unique_ptr<ps::GrpcParameterClient>> clients;
      for (int w = 0; w < workers; ++w) {
        ps::GrpcClientOptions o;
        o.servers = cluster.addresses();
        o.fingerprint = 0x5ca1e;
        o.total_params = n;
        o.rank = w;
        auto client = ps::GrpcParameterClient::Create(o);
        absl::Status s = client.status();
        if (s.ok()) s = (*client)->Register(w, absl::Seconds(30)).status();
        if (s.ok() && w == 0) s = (*client)->Init(std::vector<float>(n, 0.5f));
        if (!s.ok()) {
          std::fprintf(stderr, "worker %d: %s\n", w, s.ToString().c_str());
          return 1;
        }
        clients.push_back(std::move(*client));
      }
      std::atomic<int64_t> pushes{0}, errors{0};
      std::vector<std::vector<double>> latencies(workers);
      const auto start = Clock::now();
      std::vector<std::thread> threads;
      for (int w = 0; w < workers; ++w) {
        threads.emplace_back([&, w] {
          std::vector<float> params(n), grad(n, 1e-3f);
          std::vector<int64_t> versions(shards, 0);
          for (int64_t clock = 0;
               steps > 0 ? clock < steps
                         : std::chrono::duration<double>(Clock::now() - start).count() < seconds;
               ++clock) {
            const auto t0 = Clock::now();
            auto pulled = clients[w]->Pull(clock, false, absl::MakeSpan(params));
            latencies[w].push_back(
                std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
            if (!pulled.ok()) {
              ++errors;
              spdlog::error("pull: {}", pulled.status().ToString());
              return;
            }
            auto pushed = clients[w]->Push(clock, pulled->versions, 1, grad);
            if (!pushed.ok()) {
              ++errors;
              spdlog::error("push: {}", pushed.status().ToString());
              return;
            }
            pushes += shards;
          }
        });
      }
      for (auto& t : threads) t.join();
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      std::vector<double> all;
      for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
      const double rss = cluster.RssMib();
      std::printf("%s\n", ps::JsonObject()
                              .Add("bench", "scale")
                              .Add("mode", mode)
                              .Add("workers", workers)
                              .Add("shards", shards)
                              .Add("params", n)
                              .Add("model_mib", n * 4.0 / (1 << 20))
                              .Add("seconds", elapsed)
                              .Add("pushes_per_sec", pushes.load() / elapsed)
                              .Add("pull_p50_ms", Percentile(all, 0.50))
                              .Add("pull_p99_ms", Percentile(all, 0.99))
                              .Add("errors", errors.load())
                              .Add("server_rss_idle_mib", idle_rss)
                              .Add("server_rss_mib", rss)
                              .str()
                              .c_str());
      std::fflush(stdout);
      if (errors.load() != 0) return 1;
    }
  }
  return 0;
}
