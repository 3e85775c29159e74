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
//
// A shard's sparse table (SparseTable) the same way: sparse_scatter/ROWS is the reference, SGD's
// step on the same rows of a plain array whose slots are known (no index), in the batch's order;
// sparse_apply/OPTIMIZER/ROWS and sparse_read/ROWS are the table's Apply and Read of batches of
// kSparseBatch distinct random keys among ROWS rows of kSparseDim floats, with rows_per_sec and
// ratio_vs_scatter.
//
// And a worker's top-k compression (TopKCompressor::Compress at 1 %: the gradient added to the
// residual, the k largest magnitudes selected, encoded and taken out of it) against the textbook
// exact selection doing the same in the same run, topk_nth_element/N: nth_element over the
// indices by magnitude, then a sort of the k chosen. topk_compress/N carries ratio_vs_nth_element.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/base/random.h"
#include "common/codec/tensor_codec.h"
#include "common/optim/optimizer.h"
#include "common/optim/sparse_table.h"

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
// streams over n elements (gbps only for streams > 0); returns parameters per second over the
// wall time of the loop.
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
  if (streams > 0) state.counters["gbps"] = per_second * streams * 4 / 1e9;
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

constexpr int64_t kSparseRows = 1000000;
constexpr int64_t kSparseDim = 16;
constexpr int64_t kSparseBatch = 10000;
constexpr int kSparseBatches = 16;

// The table's keys: row r's is Mix64(r), so creation order and key order are unrelated, as for
// real ids.
uint64_t SparseKey(int64_t row) { return ps::Mix64(static_cast<uint64_t>(row)); }

// kSparseBatches batches of distinct rows (row numbers), each sorted by key as a push's are.
const std::vector<std::vector<int64_t>>& SparseBatches() {
  static const auto* batches = [] {
    auto* out = new std::vector<std::vector<int64_t>>(kSparseBatches);
    ps::Rng rng(7);
    for (auto& batch : *out) {
      for (int64_t i = 0; i < kSparseBatch; ++i) {
        batch.push_back(static_cast<int64_t>(rng.NextU64() % kSparseRows));
      }
      std::sort(batch.begin(), batch.end(),
                [](int64_t a, int64_t b) { return SparseKey(a) < SparseKey(b); });
      batch.erase(std::unique(batch.begin(), batch.end()), batch.end());
    }
    return out;
  }();
  return *batches;
}

double& SparseScatterRate() {
  static double rate = 0;
  return rate;
}

// Runs `step(batch)` over the batches for every iteration; sets rows_per_sec and returns it.
template <typename Step>
double MeasureRows(benchmark::State& state, Step step) {
  int64_t rows = 0;
  const auto start = Clock::now();
  for (auto _ : state) {
    for (const std::vector<int64_t>& batch : SparseBatches()) {
      step(batch);
      rows += static_cast<int64_t>(batch.size());
    }
    benchmark::ClobberMemory();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double per_second = static_cast<double>(rows) / (seconds > 0 ? seconds : 1e-9);
  state.counters["rows_per_sec"] = per_second;
  const double reference = SparseScatterRate();
  state.counters["ratio_vs_scatter"] = reference > 0 ? per_second / reference : 0.0;
  return per_second;
}

void SparseScatter(benchmark::State& state) {
  std::vector<float> table(kSparseRows * kSparseDim, 0.5f), g(kSparseBatch * kSparseDim, 1e-3f);
  SparseScatterRate() = MeasureRows(state, [&](const std::vector<int64_t>& batch) {
    for (size_t i = 0; i < batch.size(); ++i) {
      float* w = table.data() + batch[i] * kSparseDim;
      const float* gi = g.data() + i * kSparseDim;
      for (int64_t d = 0; d < kSparseDim; ++d) w[d] -= 1e-6f * gi[d];
    }
  });
  state.counters["ratio_vs_scatter"] = 1.0;
}

// A table holding all kSparseRows rows, created in row order.
std::unique_ptr<ps::SparseTable> FilledTable(ps::SparseOptimizerKind kind) {
  ps::SparseOptimizerOptions o;
  o.kind = kind;
  o.lr = 1e-6f;
  auto table =
      std::make_unique<ps::SparseTable>(ps::SparseTableSpec{"bench", kSparseDim, 0.05f}, o);
  constexpr int64_t kFill = 100000;
  std::vector<uint64_t> keys(kFill);
  const std::vector<float> g(kFill * kSparseDim, 1e-3f);
  for (int64_t first = 0; first < kSparseRows; first += kFill) {
    for (int64_t i = 0; i < kFill; ++i) keys[i] = SparseKey(first + i);
    table->Apply(keys, g);
  }
  return table;
}

std::vector<std::vector<uint64_t>> SparseBatchKeys() {
  std::vector<std::vector<uint64_t>> keys;
  for (const std::vector<int64_t>& batch : SparseBatches()) {
    keys.emplace_back();
    for (int64_t row : batch) keys.back().push_back(SparseKey(row));
  }
  return keys;
}

void SparseApply(benchmark::State& state, ps::SparseOptimizerKind kind) {
  const std::unique_ptr<ps::SparseTable> table = FilledTable(kind);
  const std::vector<std::vector<uint64_t>> keys = SparseBatchKeys();
  const std::vector<float> g(kSparseBatch * kSparseDim, 1e-3f);
  size_t next = 0;
  MeasureRows(state, [&](const std::vector<int64_t>& batch) {
    table->Apply(keys[next++ % keys.size()],
                 absl::MakeConstSpan(g.data(), batch.size() * kSparseDim));
  });
}

void SparseRead(benchmark::State& state) {
  const std::unique_ptr<ps::SparseTable> table = FilledTable(ps::SparseOptimizerKind::kSgd);
  const std::vector<std::vector<uint64_t>> keys = SparseBatchKeys();
  std::vector<float> out(kSparseBatch * kSparseDim);
  size_t next = 0;
  MeasureRows(state, [&](const std::vector<int64_t>& batch) {
    table->Read(keys[next++ % keys.size()], absl::MakeSpan(out.data(), batch.size() * kSparseDim));
  });
}

constexpr double kTopKRatio = 0.01;

// A gradient of N(0, 1) values, the same for both top-k benchmarks.
std::vector<float> TopKGradient(int64_t n) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> g(n);
  for (float& v : g) v = normal(rng);
  return g;
}

std::map<int64_t, double>& NthElementRates() {
  static std::map<int64_t, double> rates;
  return rates;
}

void TopKNthElement(benchmark::State& state, int64_t n) {
  const std::vector<float> g = TopKGradient(n);
  std::vector<float> residual(n, 0.0f);
  std::vector<uint32_t> order(n);
  const int64_t k = static_cast<int64_t>(std::ceil(kTopKRatio * static_cast<double>(n)));
  std::vector<char> out(k * 8);
  NthElementRates()[n] = Measure(state, n, 0, [&] {
    float* r = residual.data();
    for (int64_t i = 0; i < n; ++i) r[i] += g[i];
    std::iota(order.begin(), order.end(), 0u);
    std::nth_element(order.begin(), order.begin() + k, order.end(),
                     [r](uint32_t a, uint32_t b) { return std::fabs(r[a]) > std::fabs(r[b]); });
    std::sort(order.begin(), order.begin() + k);
    for (int64_t i = 0; i < k; ++i) {
      std::memcpy(out.data() + 8 * i, &order[i], 4);
      std::memcpy(out.data() + 8 * i + 4, &r[order[i]], 4);
      r[order[i]] = 0.0f;
    }
  });
  state.counters["ratio_vs_nth_element"] = 1.0;
}

void TopKCompress(benchmark::State& state, int64_t n) {
  const std::vector<float> g = TopKGradient(n);
  ps::TopKCompressor compressor(n, kTopKRatio);
  std::vector<char> out;
  const double per_second = Measure(state, n, 0, [&] { compressor.Compress(g, 0, n, &out); });
  const auto reference = NthElementRates().find(n);
  state.counters["ratio_vs_nth_element"] =
      reference == NthElementRates().end() ? 0.0 : per_second / reference->second;
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
  const std::string rows = std::to_string(kSparseRows);
  benchmark::RegisterBenchmark(("sparse_scatter/" + rows).c_str(), SparseScatter)->UseRealTime();
  for (ps::SparseOptimizerKind kind :
       {ps::SparseOptimizerKind::kAdagrad, ps::SparseOptimizerKind::kLazyAdam,
        ps::SparseOptimizerKind::kSgd}) {
    const std::string name = "sparse_apply/" + ps::SparseOptimizerKindName(kind) + "/" + rows;
    benchmark::RegisterBenchmark(name.c_str(), SparseApply, kind)->UseRealTime();
  }
  benchmark::RegisterBenchmark(("sparse_read/" + rows).c_str(), SparseRead)->UseRealTime();
  for (int64_t n : kSizes) {
    benchmark::RegisterBenchmark(("topk_nth_element/" + std::to_string(n)).c_str(), TopKNthElement,
                                 n)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("topk_compress/" + std::to_string(n)).c_str(), TopKCompress, n)
        ->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
