// ps_bench_apply: how fast a shard applies an update, against a STREAM-like triad
// (a[i] = b[i] + s * c[i]) over the same number of elements, measured in the same run. SGD reads
// the gradient and reads and writes the weights: the same three streams as the triad, so its
// ratio_vs_stream says how close the update runs to memory bandwidth. Momentum and Adam touch
// more state (4 and 5 streams). One JSON line per measurement:
//   {"bench":"apply","optimizer":"sgd","params":16777216,"params_per_sec":...,"gbps":...,
//    "ratio_vs_stream":...}

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "common/base/json_lines.h"
#include "common/cli/cli.h"
#include "common/optim/optimizer.h"

ABSL_FLAG(double, seconds, 1.0, "Time spent on each measurement.");
ABSL_FLAG(std::vector<std::string>, threads, std::vector<std::string>({"1", "0"}),
          "Update threads to measure (0: all hardware threads); the triad stays one thread.");
ABSL_FLAG(std::vector<std::string>, sizes, std::vector<std::string>({"1048576", "16777216"}),
          "Slice sizes, in parameters.");

namespace {

using Clock = std::chrono::steady_clock;

// Runs `body` repeatedly for about `seconds`; returns the mean seconds per call (best of 3 runs).
template <typename Body>
double TimePerCall(double seconds, Body body) {
  double best = 1e30;
  for (int run = 0; run < 3; ++run) {
    int64_t calls = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    do {
      body();
      ++calls;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < seconds / 3);
    best = std::min(best, elapsed / calls);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  ps::ParseCommandLine(argc, argv,
                       "Update rate of the shard's optimizers against a STREAM-like triad.\n"
                       "  ps_bench_apply [--seconds 1] [--sizes 1048576,16777216]");
  const double seconds = absl::GetFlag(FLAGS_seconds);
  for (const std::string& size_text : absl::GetFlag(FLAGS_sizes)) {
    const int64_t n = std::stoll(size_text);
    std::vector<float> a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);
    const float s = 0.5f;
    // The reference: the same loop shape the compiler vectorises for the optimizer.
    const double triad = TimePerCall(seconds, [&] {
      float* pa = a.data();
      const float* pb = b.data();
      const float* pc = c.data();
      for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
    });
    const double stream_rate = n / triad;
    std::printf("%s\n", ps::JsonObject()
                            .Add("bench", "apply")
                            .Add("optimizer", "stream_triad")
                            .Add("params", n)
                            .Add("params_per_sec", stream_rate)
                            .Add("gbps", 3.0 * 4 * n / triad / 1e9)
                            .Add("ratio_vs_stream", 1.0)
                            .str()
                            .c_str());
    for (const std::string& threads_text : absl::GetFlag(FLAGS_threads))
      for (ps::OptimizerKind kind :
           {ps::OptimizerKind::kSgd, ps::OptimizerKind::kMomentum, ps::OptimizerKind::kAdam}) {
        ps::OptimizerOptions o;
        o.kind = kind;
        o.lr = 1e-6f;
        o.apply_threads = std::stoi(threads_text);
        ps::Optimizer optimizer(o, n);
        std::vector<float> w(n, 1.0f), g(n, 1e-3f);
        int64_t step = 0;
        const double t =
            TimePerCall(seconds, [&] { optimizer.Apply(step++, g, absl::MakeSpan(w)); });
        const int streams = kind == ps::OptimizerKind::kSgd        ? 3
                            : kind == ps::OptimizerKind::kMomentum ? 5
                                                                   : 7;
        std::printf("%s\n", ps::JsonObject()
                                .Add("bench", "apply")
                                .Add("optimizer", ps::OptimizerKindName(kind))
                                .Add("apply_threads", o.apply_threads)
                                .Add("params", n)
                                .Add("params_per_sec", n / t)
                                .Add("gbps", static_cast<double>(streams) * 4 * n / t / 1e9)
                                .Add("ratio_vs_stream", (n / t) / stream_rate)
                                .str()
                                .c_str());
      }
  }
  return 0;
}
