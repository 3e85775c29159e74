// ps_bench_device: forward+backward throughput of the MLP and the CNN (batch 64 and 512) and of
// the 6-layer, 6-head, 384-wide language model at context 256 (batch 4; 64 on a GPU) on each
// device this build and machine have (cpu always; cuda when a GPU is visible), with the share
// of a training step spent in host<->device copies, the time of DLRM's dot interaction (batch
// 128 and 2048), and the SGEMM rate of the CNN's largest layer (conv2 as im2col + GEMM). One
// JSON line per measurement; GPU lines carry ratio_vs_cpu, against the CPU figure measured in
// the same run. "train_step" lines time the trainer's whole step (StepGradient) with the copies
// overlapped with compute and without, alternating, and print speedup_overlapped (serial /
// overlapped step time, same run).
//
//   ps_bench_device [--seconds 1.5] [--devices cpu,cuda] [--gpt_context 256]

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/base/json_lines.h"
#include "common/base/random.h"
#include "common/cli/cli.h"
#include "common/nn/model.h"
#include "common/nn/model_registry.h"
#include "worker/device_select.h"
#include "worker/step_gradient.h"

ABSL_FLAG(double, seconds, 1.5, "Minimum measuring time per figure.");
ABSL_FLAG(std::string, devices, "cpu,cuda", "Devices to measure; unavailable ones are skipped.");
ABSL_FLAG(int, gpt_context, 256, "The language model's context (gpt lines).");

namespace {

struct StepTimes {
  double samples_per_sec = 0;  // forward + backward only
  double tokens_per_sec = 0;   // predictions per second: samples times labels per sample
  double copy_share = 0;       // host<->device copies / whole step
  double step_ms = 0;
};

// The samples a model is measured on: Fashion-MNIST-shaped images, or for the language model
// windows of `context` token ids over a 65-character vocabulary (the King James text's size).
ps::SampleShape ShapeFor(const ps::ModelSpec& spec, int context) {
  if (spec.name != "gpt") return ps::SampleShape{28 * 28, 10, ps::ImageShape{28, 28, 1}};
  ps::SampleShape text;
  text.features = context;
  text.labels = context;
  text.num_classes = 65;
  return text;
}

// Times training steps of `spec` at `batch`: copy weights and a batch in, forward+backward,
// copy the gradient out.
absl::StatusOr<StepTimes> MeasureSteps(ps::Device& dev, const ps::ModelSpec& spec,
                                       const ps::SampleShape& shape, int batch, double seconds) {
  auto model = ps::MakeModel(spec, shape, dev, batch);
  if (!model.ok()) return model.status();
  const int64_t n = (*model)->layout().total();
  const int64_t labels = int64_t{batch} * shape.labels;
  // Host buffers as the trainer has them: the device's preferred (pinned, for CUDA) memory.
  auto params_h = dev.AllocateHost(n * sizeof(float));
  auto grads_h = dev.AllocateHost(n * sizeof(float));
  auto x_h = dev.AllocateHost(sizeof(float) * batch * shape.features);
  auto y_h = dev.AllocateHost(sizeof(int32_t) * labels);
  if (!params_h.ok() || !grads_h.ok() || !x_h.ok() || !y_h.ok()) {
    return absl::ResourceExhaustedError("host allocation");
  }
  const absl::Span<float> params(params_h->as<float>(), n), grads(grads_h->as<float>(), n);
  const absl::Span<float> x(x_h->as<float>(), batch * shape.features);
  const absl::Span<int32_t> y(y_h->as<int32_t>(), labels);
  (*model)->InitParams(1, params.data());
  ps::Rng rng(2);
  const bool ids = shape.labels > 1;  // token windows: the inputs are ids as floats
  for (float& v : x) {
    v = ids ? static_cast<float>(rng.Below(shape.num_classes)) : rng.Uniform(-1, 1);
  }
  for (int64_t i = 0; i < labels; ++i) y[i] = static_cast<int32_t>(rng.Below(shape.num_classes));
  auto p = dev.Allocate(n * sizeof(float));
  auto g = dev.Allocate(n * sizeof(float));
  auto xd = dev.Allocate(x.size() * sizeof(float));
  auto yd = dev.Allocate(y.size() * sizeof(int32_t));
  if (!p.ok() || !g.ok() || !xd.ok() || !yd.ok()) return absl::ResourceExhaustedError("allocate");
  absl::Duration copies, compute;
  int steps = 0;
  const absl::Time start = absl::Now();
  for (int i = 0;; ++i) {
    const absl::Time t0 = absl::Now();
    auto st = dev.CopyToDevice(params.data(), n * sizeof(float), p->as<float>());
    if (st.ok()) st = dev.CopyToDevice(x.data(), x.size() * sizeof(float), xd->as<float>());
    if (st.ok()) st = dev.CopyToDevice(y.data(), y.size() * sizeof(int32_t), yd->as<int32_t>());
    if (st.ok()) st = dev.Fill(0.0f, n, g->as<float>());
    if (!st.ok()) return st;
    const absl::Time t1 = absl::Now();
    auto s = (*model)->ForwardBackward(p->as<float>(), xd->as<float>(), yd->as<int32_t>(), batch,
                                       1.0f, g->as<float>());
    if (!s.ok()) return s.status();
    if (auto sync = dev.Synchronize(); !sync.ok()) return sync;
    const absl::Time t2 = absl::Now();
    if (auto c = dev.CopyToHost(g->as<float>(), n * sizeof(float), grads.data()); !c.ok()) return c;
    const absl::Time t3 = absl::Now();
    if (i == 0) continue;  // warm-up: first-touch allocations, cuBLAS heuristics
    copies += (t1 - t0) + (t3 - t2);
    compute += t2 - t1;
    ++steps;
    if (steps >= 3 && absl::Now() - start > absl::Seconds(seconds)) break;
  }
  StepTimes out;
  out.samples_per_sec = steps * batch / absl::ToDoubleSeconds(compute);
  out.tokens_per_sec = out.samples_per_sec * shape.labels;
  out.copy_share = absl::ToDoubleSeconds(copies) / absl::ToDoubleSeconds(copies + compute);
  out.step_ms = absl::ToDoubleMilliseconds(copies + compute) / steps;
  return out;
}

struct SerialAndOverlapped {
  double serial_ms = 0;
  double overlapped_ms = 0;
};

// Whole training steps as the trainer runs them (StepGradient: the weights in, forward and
// backward over `accumulate` micro-batches, the gradient out), with the device's async copies
// overlapped with compute and without. The two alternate in short rounds, so both see the same
// machine; each figure is the median round's mean step time.
absl::StatusOr<SerialAndOverlapped> MeasureTrainingSteps(ps::Device& dev, const ps::ModelSpec& spec,
                                                         int batch, int accumulate,
                                                         double seconds) {
  ps::ImageDataset data;
  data.rows = 28;
  data.cols = 28;
  ps::Rng rng(3);
  const int samples = batch * accumulate * 4;
  for (int i = 0; i < samples; ++i) {
    for (int p = 0; p < 28 * 28; ++p) data.pixels.push_back(static_cast<uint8_t>(rng.Below(256)));
    data.labels.push_back(i % 10);
  }
  auto model = ps::MakeModel(spec, data.shape(), dev, batch);
  if (!model.ok()) return model.status();
  ps::BatchPlanOptions plan;
  plan.dataset_size = samples;
  plan.batch_size = batch;
  plan.accumulate = accumulate;
  auto serial = ps::StepGradient::Create(**model, dev, data, plan, /*overlap_copies=*/false);
  auto overlapped = ps::StepGradient::Create(**model, dev, data, plan, /*overlap_copies=*/true);
  if (!serial.ok()) return serial.status();
  if (!overlapped.ok()) return overlapped.status();
  const int64_t n = (*model)->layout().total();
  auto params_h = dev.AllocateHost(n * sizeof(float));
  auto grads_h = dev.AllocateHost(n * sizeof(float));
  if (!params_h.ok() || !grads_h.ok()) return absl::ResourceExhaustedError("host allocation");
  const absl::Span<float> params(params_h->as<float>(), n), grads(grads_h->as<float>(), n);
  (*model)->InitParams(1, params.data());
  constexpr int kStepsPerRound = 5;
  std::vector<double> rounds[2];  // mean step ms per round: serial, overlapped
  int64_t step = 0;
  const absl::Time start = absl::Now();
  for (int round = 0; round < 3 || absl::Now() - start < absl::Seconds(seconds); ++round) {
    for (int overlap = 0; overlap < 2; ++overlap) {
      ps::StepGradient& g = overlap == 1 ? **overlapped : **serial;
      if (round == 0) {  // warm-up: first-touch allocations, cuBLAS heuristics
        if (auto s = g.Compute(step++, params, grads); !s.ok()) return s.status();
      }
      const absl::Time t0 = absl::Now();
      for (int i = 0; i < kStepsPerRound; ++i) {
        if (auto s = g.Compute(step++ % 4, params, grads); !s.ok()) return s.status();
      }
      rounds[overlap].push_back(absl::ToDoubleMilliseconds(absl::Now() - t0) / kStepsPerRound);
    }
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return SerialAndOverlapped{median(rounds[0]), median(rounds[1])};
}

struct InteractionTimes {
  double forward_us = 0;
  double backward_us = 0;
};

// DLRM's dot interaction (common/nn/layers.h) on `batch` samples of 27 vectors of 16 (the
// default model: the bottom MLP's output and 26 embedding rows), forward and backward, each the
// mean over at least `seconds`.
absl::StatusOr<InteractionTimes> MeasureInteraction(ps::Device& dev, int batch, double seconds) {
  constexpr int kVectors = 27, kDim = 16;
  constexpr int64_t kWidth = kDim + kVectors * (kVectors - 1) / 2;
  auto x = dev.Allocate(sizeof(float) * batch * kVectors * kDim);
  auto y = dev.Allocate(sizeof(float) * batch * kWidth);
  auto dx = dev.Allocate(sizeof(float) * batch * kVectors * kDim);
  if (!x.ok() || !y.ok() || !dx.ok()) return absl::ResourceExhaustedError("allocate");
  // Inputs for both passes: the vectors, and an upstream gradient of the output's shape.
  std::vector<float> host(static_cast<size_t>(batch) * std::max<int64_t>(kVectors * kDim, kWidth));
  ps::Rng rng(4);
  for (float& v : host) v = rng.Uniform(-1, 1);
  if (auto s =
          dev.CopyToDevice(host.data(), batch * kVectors * kDim * sizeof(float), x->as<float>());
      !s.ok()) {
    return s;
  }
  if (auto s = dev.CopyToDevice(host.data(), batch * kWidth * sizeof(float), y->as<float>());
      !s.ok()) {
    return s;
  }
  const auto time = [&](bool backward) -> absl::StatusOr<double> {
    int reps = 0;
    absl::Time start;
    for (;; ++reps) {
      if (reps == 1) start = absl::Now();  // the first is a warm-up
      if (reps > 3 && absl::Now() - start > absl::Seconds(seconds)) break;
      auto s = backward ? dev.DotInteractionBackward(batch, kVectors, kDim, x->as<float>(),
                                                     y->as<float>(), dx->as<float>())
                        : dev.DotInteractionForward(batch, kVectors, kDim, x->as<float>(),
                                                    y->as<float>());
      if (s.ok()) s = dev.Synchronize();
      if (!s.ok()) return s;
    }
    return absl::ToDoubleMicroseconds(absl::Now() - start) / (reps - 1);
  };
  InteractionTimes out;
  auto forward = time(false);
  if (!forward.ok()) return forward.status();
  auto backward = time(true);
  if (!backward.ok()) return backward.status();
  out.forward_us = *forward;
  out.backward_us = *backward;
  return out;
}

// SGEMM rate of conv2's forward product at batch 512: (512*8*8, 800) x (800, 64).
absl::StatusOr<double> GemmTflops(ps::Device& dev, double seconds) {
  const int m = 512 * 8 * 8, n = 64, k = 800;
  auto a = dev.Allocate(sizeof(float) * m * k);
  auto b = dev.Allocate(sizeof(float) * k * n);
  auto c = dev.Allocate(sizeof(float) * m * n);
  if (!a.ok() || !b.ok() || !c.ok()) return absl::ResourceExhaustedError("allocate");
  int reps = 0;
  if (auto s =
          dev.Gemm(false, false, m, n, k, 1, a->as<float>(), b->as<float>(), 0, c->as<float>());
      !s.ok()) {
    return s;
  }
  if (auto s = dev.Synchronize(); !s.ok()) return s;
  const absl::Time start = absl::Now();
  while (reps < 3 || absl::Now() - start < absl::Seconds(seconds)) {
    for (int i = 0; i < 10; ++i) {
      auto s =
          dev.Gemm(false, false, m, n, k, 1, a->as<float>(), b->as<float>(), 0, c->as<float>());
      if (!s.ok()) return s;
    }
    if (auto s = dev.Synchronize(); !s.ok()) return s;
    reps += 10;
  }
  return 2.0 * m * n * k * reps / absl::ToDoubleSeconds(absl::Now() - start) / 1e12;
}

}  // namespace

int main(int argc, char** argv) {
  ps::ParseCommandLine(argc, argv, "Per-device forward+backward throughput of the MLP and CNN.");
  const double seconds = absl::GetFlag(FLAGS_seconds);
  std::map<std::string, double> cpu_rate;  // "model/batch" and "gemm" -> CPU figure
  if (!(seconds > 0)) {
    std::fprintf(stderr, "--seconds must be > 0\n");
    return 2;
  }
  // Every device named is opened before any is measured: a misspelt one (INVALID_ARGUMENT) stops
  // the bench with exit 2 at once; one this machine or build lacks is skipped, and said so.
  std::vector<std::pair<std::string, absl::StatusOr<std::unique_ptr<ps::Device>>>> devices;
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_devices), ',')) {
    devices.emplace_back(std::string(name), ps::CreateDevice(std::string(name)));
    if (absl::IsInvalidArgument(devices.back().second.status())) {
      std::fprintf(stderr, "--devices: '%s' is not cpu, cuda or cuda:N\n",
                   devices.back().first.c_str());
      return 2;
    }
  }
  int failures = 0;
  for (auto& [name, dev] : devices) {
    if (!dev.ok()) {
      std::fprintf(stderr, "skipping %s: %s\n", name.c_str(), dev.status().ToString().c_str());
      continue;
    }
    const bool is_cpu = name == "cpu";
    // The MLP and the CNN at batch 64 and 512; the language model in nanoGPT's Shakespeare shape
    // (6 layers, 6 heads, 384 wide, context 256) at batch 4 everywhere (the CPU reference: a
    // step there takes seconds) and at nanoGPT's batch 64 on a GPU.
    const int context = absl::GetFlag(FLAGS_gpt_context);
    ps::ModelSpec gpt{"gpt", {}};
    gpt.layers = 6;
    gpt.heads = 6;
    gpt.dim = 384;
    struct Shape {
      ps::ModelSpec spec;
      int batch;
    };
    std::vector<Shape> shapes = {{ps::ModelSpec{"mlp", {}}, 64},
                                 {ps::ModelSpec{"mlp", {}}, 512},
                                 {ps::ModelSpec{"cnn", {}}, 64},
                                 {ps::ModelSpec{"cnn", {}}, 512},
                                 {gpt, 4}};
    if (!is_cpu) shapes.push_back({gpt, 64});
    for (const Shape& m : shapes) {
      const std::string& model = m.spec.name;
      const int batch = m.batch;
      const ps::SampleShape shape = ShapeFor(m.spec, context);
      auto t = MeasureSteps(**dev, m.spec, shape, batch, seconds);
      if (!t.ok()) {
        std::fprintf(stderr, "%s %s %d: %s\n", std::string(name).c_str(), model.c_str(), batch,
                     t.status().ToString().c_str());
        ++failures;
        continue;
      }
      const std::string key = model + "/" + std::to_string(batch);
      if (is_cpu) cpu_rate[key] = t->samples_per_sec;
      ps::JsonObject line;
      line.Add("bench", "fwd_bwd")
          .Add("device", (*dev)->name())
          .Add("model", model)
          .Add("batch", batch)
          .Add("samples_per_sec", t->samples_per_sec)
          .Add("step_ms", t->step_ms)
          .Add("copy_share", t->copy_share);
      if (model == "gpt") {
        line.Add("layers", gpt.layers)
            .Add("heads", gpt.heads)
            .Add("dim", gpt.dim)
            .Add("context", context)
            .Add("tokens_per_sec", t->tokens_per_sec);
      }
      if (!is_cpu && cpu_rate.count(key)) {
        line.Add("ratio_vs_cpu", t->samples_per_sec / cpu_rate[key]);
      }
      std::printf("%s\n", line.str().c_str());
      std::fflush(stdout);
    }
    // The trainer's whole step, copies overlapped with compute or not. On a host-addressable
    // device (cpu) there is nothing to copy: both are the same step, a noise reference.
    for (const char* model : {"mlp", "cnn"}) {
      for (int accumulate : {1, 4}) {
        auto t = MeasureTrainingSteps(**dev, ps::ModelSpec{model, {}}, 64, accumulate, seconds);
        if (!t.ok()) {
          std::fprintf(stderr, "%s %s step x%d: %s\n", std::string(name).c_str(), model, accumulate,
                       t.status().ToString().c_str());
          ++failures;
          continue;
        }
        ps::JsonObject line;
        line.Add("bench", "train_step")
            .Add("device", (*dev)->name())
            .Add("model", model)
            .Add("batch", 64)
            .Add("accumulate", accumulate)
            .Add("overlaps_copies", (*dev)->overlaps_copies())
            .Add("step_ms_serial", t->serial_ms)
            .Add("step_ms_overlapped", t->overlapped_ms)
            .Add("speedup_overlapped", t->serial_ms / t->overlapped_ms);
        std::printf("%s\n", line.str().c_str());
        std::fflush(stdout);
      }
    }
    for (int batch : {128, 2048}) {
      auto t = MeasureInteraction(**dev, batch, seconds);
      if (!t.ok()) {
        std::fprintf(stderr, "%s dot_interaction %d: %s\n", std::string(name).c_str(), batch,
                     t.status().ToString().c_str());
        ++failures;
        continue;
      }
      const std::string key = "dot_interaction/" + std::to_string(batch);
      const double per_step_us = t->forward_us + t->backward_us;
      if (is_cpu) cpu_rate[key] = per_step_us;
      ps::JsonObject line;
      line.Add("bench", "dot_interaction")
          .Add("device", (*dev)->name())
          .Add("batch", batch)
          .Add("vectors", 27)
          .Add("dim", 16)
          .Add("forward_us", t->forward_us)
          .Add("backward_us", t->backward_us);
      if (!is_cpu && cpu_rate.count(key)) line.Add("ratio_vs_cpu", cpu_rate[key] / per_step_us);
      std::printf("%s\n", line.str().c_str());
      std::fflush(stdout);
    }
    auto tflops = GemmTflops(**dev, seconds);
    if (!tflops.ok()) {
      ++failures;
      continue;
    }
    if (is_cpu) cpu_rate["gemm"] = *tflops;
    ps::JsonObject line;
    line.Add("bench", "sgemm_conv2")
        .Add("device", (*dev)->name())
        .Add("m", 32768)
        .Add("n", 64)
        .Add("k", 800)
        .Add("tflops", *tflops);
    if (!is_cpu && cpu_rate.count("gemm")) line.Add("ratio_vs_cpu", *tflops / cpu_rate["gemm"]);
    std::printf("%s\n", line.str().c_str());
  }
  return failures == 0 ? 0 : 1;
}
