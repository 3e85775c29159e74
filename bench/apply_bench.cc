// ps_bench_apply: how fast a shard applies an update, against a STREAM-like triad
// (a[i] = b[i] + s * c[i]) over the same number of elements, measured in the same run. SGD reads
// the gradient and reads and writes the weights: the same three streams as the triad, so its
// ratio_vs_stream says how close the update runs to memory bandwidth. Momentum and AdaGrad touch
// five streams, Adam and AdamW seven.
//
// Google Benchmark micro-benchmarks: `ps_bench_apply [--benchmark_filter=adam/] [--benchmark_
// format=json] [--benchmark_min_time=1]`. Names are stream_triad/N and OPTIMIZER/threads:T/N
// (T 0: all hardware threads; the triad runs on one). The triads run first, so every optimizer's
// ratio_vs_stream divides its parameters per second by the triad's at its size in the same run
// (0 when a filter left that triad out).

#include <benchmark/benchmark.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "common/optim/optimizer.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kSizes[] = {int64_t{1} << 20, int64_t{1} << 22, int64_t{1} << 24};
constexpr int kThreads[] = {1, 0};

// The triad's parameters per second at each size, for the ratios of the benchmarks after it.
std::map<int64_t, double>& TriadRates() {
  static std::map<int64_t, double> rates;
  return rates;
}

// Float streams an update reads or writes per element: the gradient, the weights (read and
// written), and each slot (read and written).
int Streams(ps::OptimizerKind kind) {
  switch (kind) {
    case ps::OptimizerKind::kSgd:
      return 3;
    case ps::OptimizerKind::kMomentum:
    case ps::OptimizerKind::kAdagrad:
      return 5;
    case ps::OptimizerKind::kAdam:
    case ps::OptimizerKind::kAdamW:
      return 7;
  }
  return 0;
}

// Runs `body` for every iteration the state asks for and sets the counters of `streams` float
// streams over n elements; returns parameters per second over the wall time of the loop.
template <typename Body>
double Measure(benchmark::State& state, int64_t n, int streams, Body body) {
  const auto start = Clock::now();
  for (auto _ : state) {
    body();
    benchmark::ClobberMemory();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double per_second = static_cast<double>(n) * static_cast<double>(state.iterations()) /
                            (seconds > 0 ? seconds : 1e-9);
  state.counters["params_per_sec"] = per_second;
  state.counters["gbps"] = per_second * streams * 4 / 1e9;
  return per_second;
}

void StreamTriad(benchmark::State& state, int64_t n) {
  // The reference: the same loop shape the compiler vectorises for the optimizer (this file gets
  // the optimizer's compile flags, bench/CMakeLists.txt).
  std::vector<float> a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);
  const float s = 0.5f;
  TriadRates()[n] = Measure(state, n, 3, [&] {
    float* pa = a.data();
    const float* pb = b.data();
    const float* pc = c.data();
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
  });
  state.counters["ratio_vs_stream"] = 1.0;
}

void Apply(benchmark::State& state, ps::OptimizerKind kind, int threads, int64_t n) {
  ps::OptimizerOptions o;
  o.kind = kind;
  o.lr = 1e-6f;
  o.apply_threads = threads;
  ps::Optimizer optimizer(o, n);
  std::vector<float> w(n, 1.0f), g(n, 1e-3f);
  int64_t update = 0;
  const double per_second =
      Measure(state, n, Streams(kind), [&] { optimizer.Apply(update++, g, absl::MakeSpan(w)); });
  const auto triad = TriadRates().find(n);
  state.counters["ratio_vs_stream"] =
      triad == TriadRates().end() ? 0.0 : per_second / triad->second;
}

}  // namespace

int main(int argc, char** argv) {
  for (int64_t n : kSizes) {
    benchmark::RegisterBenchmark(("stream_triad/" + std::to_string(n)).c_str(), StreamTriad, n)
        ->UseRealTime();
  }
  for (ps::OptimizerKind kind : ps::AllOptimizerKinds()) {
    for (int threads : kThreads) {
      for (int64_t n : kSizes) {
        const std::string name = ps::OptimizerKindName(kind) +
                                 "/threads:" + std::to_string(threads) + "/" + std::to_string(n);
        benchmark::RegisterBenchmark(name.c_str(), Apply, kind, threads, n)->UseRealTime();
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
