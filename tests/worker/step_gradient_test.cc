// StepGradient on a device whose memory is apart from the host's, with the copies overlapped
// with compute or not: the same gradients and batch sums as CpuDevice, to the bit, for the MLP
// and the CNN, with one micro-batch and with several. The device (DeferredCopyDevice) lands each
// async copy as late as the contract allows and checks that no source changed in flight, so a
// missing wait or an early reuse of a buffer changes the bits or fails the step.

#include "worker/step_gradient.h"

#include <cmath>
#include <limits>
#include <vector>

#include "common/base/random.h"
#include "common/device/cpu_device.h"
#include "common/nn/model_registry.h"
#include "gtest/gtest.h"
#include "tests/common/device/deferred_copy_device.h"

namespace ps {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

ImageDataset RandomImages(int n, uint64_t seed) {
  ImageDataset d;
  d.rows = 28;
  d.cols = 28;
  Rng rng(seed);
  d.pixels.resize(static_cast<size_t>(n) * 28 * 28);
  for (uint8_t& p : d.pixels) p = static_cast<uint8_t>(rng.Uniform(0, 256));
  for (int i = 0; i < n; ++i) d.labels.push_back(i % 10);
  return d;
}

BatchPlanOptions Plan(int64_t dataset_size, int accumulate) {
  BatchPlanOptions o;
  o.dataset_size = dataset_size;
  o.num_workers = 1;
  o.rank = 0;
  o.batch_size = 8;
  o.accumulate = accumulate;
  o.seed = 3;
  return o;
}

ModelSpec Spec(const std::string& name) {
  ModelSpec spec;
  spec.name = name;
  spec.hidden = {16};
  return spec;
}

// Weights of step `step`: the model's initial weights, moved a little per step so that every
// step reads other values.
std::vector<float> StepWeights(const Model& model, int step) {
  std::vector<float> w(model.layout().total());
  model.InitParams(7, w.data());
  for (size_t i = 0; i < w.size(); ++i) w[i] += 1e-3f * static_cast<float>((i + step) % 13);
  return w;
}

struct StepResult {
  std::vector<float> grads;
  BatchStats stats;
};

// A model of `spec` on `device` (batch 8) and its StepGradient over `data`.
struct ModelAndStep {
  std::unique_ptr<Model> model;
  std::unique_ptr<StepGradient> step;
};
ModelAndStep MakeStep(Device& device, const Dataset& data, const std::string& spec, int accumulate,
                      bool overlap_copies = true) {
  ModelAndStep out;
  auto model = MakeModel(Spec(spec), SampleShape{28 * 28, 10, ImageShape{28, 28, 1}}, device, 8);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return out;
  out.model = *std::move(model);
  auto step =
      StepGradient::Create(*out.model, device, data, Plan(data.size(), accumulate), overlap_copies);
  EXPECT_TRUE(step.ok()) << step.status();
  if (step.ok()) out.step = *std::move(step);
  return out;
}

// Steps 0..2 of `spec` on `device`, each from its own weights into a gradient buffer full of NaN.
std::vector<StepResult> RunSteps(Device& device, const std::string& spec, int accumulate,
                                 bool overlap_copies) {
  const ImageDataset data = RandomImages(96, 1);
  const ModelAndStep m = MakeStep(device, data, spec, accumulate, overlap_copies);
  std::vector<StepResult> results;
  if (m.step == nullptr) return results;
  for (int step = 0; step < 3; ++step) {
    std::vector<float> params = StepWeights(*m.model, step);
    StepResult r;
    r.grads.assign(params.size(), kNaN);
    auto stats = m.step->Compute(step, params, absl::MakeSpan(r.grads));
    EXPECT_TRUE(stats.ok()) << stats.status();
    if (stats.ok()) r.stats = *stats;
    // Compute has returned: the caller owns both buffers again, and reuses them at once.
    std::fill(params.begin(), params.end(), kNaN);
    results.push_back(std::move(r));
  }
  return results;
}

void ExpectSameBits(const std::vector<StepResult>& got, const std::vector<StepResult>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t step = 0; step < got.size(); ++step) {
    EXPECT_EQ(got[step].grads, want[step].grads) << "step " << step;
    EXPECT_EQ(got[step].stats.loss_sum, want[step].stats.loss_sum) << "step " << step;
    EXPECT_EQ(got[step].stats.correct, want[step].stats.correct) << "step " << step;
    EXPECT_EQ(got[step].stats.count, want[step].stats.count) << "step " << step;
  }
}

TEST(StepGradient, CopiesOverlappedOrNotGiveTheCpuDevicesBits) {
  for (const std::string spec : {"mlp", "cnn"}) {
    for (int accumulate : {1, 3}) {
      SCOPED_TRACE(spec + " x" + std::to_string(accumulate));
      CpuDevice cpu;
      const std::vector<StepResult> want = RunSteps(cpu, spec, accumulate, true);
      ASSERT_EQ(want.size(), 3u);
      EXPECT_EQ(want[0].stats.count, 8 * accumulate);
      const int layers = spec == "mlp" ? 2 : 4;  // parameter layers: fc1 fc2 / conv1 conv2 fc1 fc2
      for (bool overlap : {false, true}) {
        SCOPED_TRACE(overlap ? "overlapped" : "serial");
        DeferredCopyDevice dev;
        ExpectSameBits(RunSteps(dev, spec, accumulate, overlap), want);
        EXPECT_EQ(dev.pending(), 0u);
        const DeferredCopyDevice::Counts& c = dev.counts();
        // Per step: each layer's weights in and gradient out and each micro-batch's (x, y) in on
        // the copy stream; or one copy of all weights in and of the whole gradient out, and the
        // batches, on the op stream. The loss and accuracy sums: one copy at the step's end.
        EXPECT_EQ(c.async_to_device, overlap ? 3 * (layers + 2 * accumulate) : 0);
        EXPECT_EQ(c.async_to_host, overlap ? 3 * layers : 0);
        EXPECT_EQ(c.sync_to_device, overlap ? 0 : 3 * (2 * accumulate + 1));
        EXPECT_EQ(c.sync_to_host, 3 * (overlap ? 1 : 2));
      }
    }
  }
}

// The loss and accuracy sums a step leaves on the device and reads back at its end are those
// the model returns when it waits for each batch's sums.
TEST(StepGradient, SumsReadBackAtTheEndAreTheModelsOwn) {
  const ImageDataset data = RandomImages(96, 4);
  CpuDevice cpu;
  auto model = MakeModel(Spec("mlp"), SampleShape{28 * 28, 10, ImageShape{28, 28, 1}}, cpu, 8);
  ASSERT_TRUE(model.ok());
  const BatchPlanOptions options = Plan(data.size(), 3);
  auto plan = BatchPlan::Create(options);
  ASSERT_TRUE(plan.ok());
  const std::vector<float> params = StepWeights(**model, 0);
  std::vector<float> grads(params.size());
  BatchStats want;
  std::vector<int32_t> indices;
  std::vector<float> x(8 * data.features());
  std::vector<int32_t> y(8);
  for (int micro = 0; micro < 3; ++micro) {
    plan->MicroBatch(2, micro, &indices);
    data.Gather(indices.data(), 8, x.data(), y.data());
    auto s =
        (*model)->ForwardBackward(params.data(), x.data(), y.data(), 8, 1.0f / 3, grads.data());
    ASSERT_TRUE(s.ok());
    want.loss_sum += s->loss_sum;
    want.correct += s->correct;
  }
  ASSERT_GT(want.loss_sum, 0.0);
  auto step = StepGradient::Create(**model, cpu, data, options);
  ASSERT_TRUE(step.ok());
  auto got = (*step)->Compute(2, params, absl::MakeSpan(grads));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->loss_sum, want.loss_sum);
  EXPECT_EQ(got->correct, want.correct);
  EXPECT_EQ(got->count, 24);
}

// Priority scheduling's callbacks with overlapped copies: each layer's weights are copied only
// once weights_ready has let them arrive (here: written into the buffer by the callback), and
// gradient_ready sees its layer's final gradient on the host, last layer first.
TEST(StepGradient, OverlappedLayerCallbacksSeeTheirLayerOnly) {
  const ImageDataset data = RandomImages(96, 2);
  CpuDevice cpu;
  const ModelAndStep reference = MakeStep(cpu, data, "cnn", 2);
  ASSERT_NE(reference.step, nullptr);
  const std::vector<float> weights = StepWeights(*reference.model, 0);
  std::vector<float> want(weights.size());
  ASSERT_TRUE(reference.step->Compute(0, weights, absl::MakeSpan(want)).ok());

  DeferredCopyDevice dev;
  const ModelAndStep m = MakeStep(dev, data, "cnn", 2);
  ASSERT_NE(m.step, nullptr);
  std::vector<float> params(weights.size(), kNaN), grads(weights.size(), kNaN);
  std::vector<KeyRange> arrived, sent;
  StepGradient::LayerCallbacks callbacks;
  callbacks.weights_ready = [&](KeyRange r) {
    arrived.push_back(r);
    std::copy(weights.begin() + r.begin, weights.begin() + r.end, params.begin() + r.begin);
    return absl::OkStatus();
  };
  callbacks.gradient_ready = [&](KeyRange r) {
    sent.push_back(r);
    EXPECT_EQ(std::vector<float>(grads.begin() + r.begin, grads.begin() + r.end),
              std::vector<float>(want.begin() + r.begin, want.begin() + r.end))
        << "layer at " << r.begin;
    return absl::OkStatus();
  };
  auto stats = m.step->ComputeByLayer(0, params, absl::MakeSpan(grads), callbacks);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(grads, want);
  const std::vector<KeyRange> layers = m.model->LayerParamRanges();
  ASSERT_EQ(layers.size(), 4u);
  ASSERT_EQ(arrived.size(), layers.size());
  ASSERT_EQ(sent.size(), layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    EXPECT_EQ(arrived[i].begin, layers[i].begin);
    EXPECT_EQ(sent[i].begin, layers[layers.size() - 1 - i].begin);
  }
  EXPECT_EQ(dev.counts().async_to_device, 4 + 2 * 2);  // the layers' weights, (x, y) x 2
  EXPECT_EQ(dev.counts().async_to_host, 4);
}

// An error from a callback ends the step with that error, and no copy is left in flight to
// write into the caller's buffers later.
TEST(StepGradient, OverlappedStepStopsAtACallbacksErrorWithNothingInFlight) {
  const ImageDataset data = RandomImages(96, 3);
  DeferredCopyDevice dev;
  const ModelAndStep m = MakeStep(dev, data, "mlp", 1);
  ASSERT_NE(m.step, nullptr);
  std::vector<float> params = StepWeights(*m.model, 0), grads(params.size(), kNaN);
  for (const bool fail_weights : {true, false}) {
    int calls = 0;
    StepGradient::LayerCallbacks callbacks;
    callbacks.weights_ready = [&](KeyRange) {
      return fail_weights && ++calls == 2 ? absl::UnavailableError("shard gone") : absl::OkStatus();
    };
    callbacks.gradient_ready = [&](KeyRange) {
      return !fail_weights && ++calls == 1 ? absl::DeadlineExceededError("push timed out")
                                           : absl::OkStatus();
    };
    auto stats = m.step->ComputeByLayer(0, params, absl::MakeSpan(grads), callbacks);
    EXPECT_EQ(stats.status().code(),
              fail_weights ? absl::StatusCode::kUnavailable : absl::StatusCode::kDeadlineExceeded);
    EXPECT_EQ(dev.pending(), 0u);
  }
}

}  // namespace
}  // namespace ps
