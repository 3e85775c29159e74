#include "common/optim/optimizer.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/enum_names.h"
#include "common/base/flush_denormals.h"

namespace ps {

namespace {

constexpr EnumName<OptimizerKind> kOptimizerNames[] = {{OptimizerKind::kSgd, "sgd"},
                                                       {OptimizerKind::kMomentum, "momentum"},
                                                       {OptimizerKind::kAdam, "adam"},
                                                       {OptimizerKind::kAdamW, "adamw"},
                                                       {OptimizerKind::kAdagrad, "adagrad"}};
constexpr EnumName<LrSchedule> kScheduleNames[] = {{LrSchedule::kConstant, "constant"},
                                                   {LrSchedule::kCosine, "cosine"},
                                                   {LrSchedule::kStep, "step"}};
constexpr EnumName<LrScaling> kScalingNames[] = {
    {LrScaling::kLinear, "linear"}, {LrScaling::kSqrt, "sqrt"}, {LrScaling::kAuto, "auto"}};

}  // namespace

absl::StatusOr<OptimizerKind> ParseOptimizerKind(const std::string& name) {
  return ParseIn(kOptimizerNames, name, "optimizer");
}

std::string OptimizerKindName(OptimizerKind kind) { return NameIn(kOptimizerNames, kind); }

const std::vector<OptimizerKind>& AllOptimizerKinds() {
  static const std::vector<OptimizerKind> kinds = [] {
    std::vector<OptimizerKind> out;
    for (const EnumName<OptimizerKind>& entry : kOptimizerNames) {
      if (std::find(out.begin(), out.end(), entry.value) == out.end()) out.push_back(entry.value);
    }
    return out;
  }();
  return kinds;
}

absl::StatusOr<LrSchedule> ParseLrSchedule(const std::string& name) {
  return ParseIn(kScheduleNames, name, "learning-rate schedule");
}

std::string LrScheduleName(LrSchedule schedule) { return NameIn(kScheduleNames, schedule); }

absl::StatusOr<LrScaling> ParseLrScaling(const std::string& name) {
  return ParseIn(kScalingNames, name, "learning-rate scaling rule");
}

std::string LrScalingName(LrScaling scaling) { return NameIn(kScalingNames, scaling); }

LrScaling ResolveLrScaling(LrScaling rule, OptimizerKind kind) {
  if (rule != LrScaling::kAuto) return rule;
  switch (kind) {
    case OptimizerKind::kSgd:
    case OptimizerKind::kMomentum:
      return LrScaling::kLinear;
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
    case OptimizerKind::kAdagrad:
      return LrScaling::kSqrt;
  }
  return LrScaling::kLinear;
}

absl::Status ValidateOptimizerOptions(const OptimizerOptions& o) {
  if (o.apply_threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "apply_threads must be >= 0 (0: all hardware threads), got ", o.apply_threads));
  }
  if (!(o.lr > 0.0f) || !std::isfinite(o.lr)) {
    return absl::InvalidArgumentError(absl::StrCat("lr must be positive, got ", o.lr));
  }
  if (!(o.momentum >= 0.0f && o.momentum < 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("momentum must be in [0, 1), got ", o.momentum));
  }
  if (!(o.beta1 >= 0.0f && o.beta1 < 1.0f) || !(o.beta2 >= 0.0f && o.beta2 < 1.0f)) {
    return absl::InvalidArgumentError("adam betas must be in [0, 1)");
  }
  if (!(o.epsilon > 0.0f)) return absl::InvalidArgumentError("epsilon must be positive");
  if (!(o.weight_decay >= 0.0f) || !std::isfinite(o.weight_decay)) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight_decay must be >= 0, got ", o.weight_decay));
  }
  if (o.warmup_updates < 0) return absl::InvalidArgumentError("warmup_updates must be >= 0");
  if (o.decay_updates < 0 || (o.schedule == LrSchedule::kCosine && o.decay_updates != 0 &&
                              o.decay_updates <= o.warmup_updates)) {
    return absl::InvalidArgumentError(absl::StrCat("cosine decay needs decay_updates (",
                                                   o.decay_updates, ") > warmup_updates (",
                                                   o.warmup_updates, "), or 0 for the run's end"));
  }
  if (o.schedule == LrSchedule::kStep && o.lr_step_updates <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the step schedule needs lr_step_updates > 0, got ", o.lr_step_updates));
  }
  if (!(o.lr_step_gamma > 0.0f && o.lr_step_gamma <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("lr_step_gamma must be in (0, 1], got ", o.lr_step_gamma));
  }
  return absl::OkStatus();
}

namespace {

// The one elementwise loop every rule shares: `rule(i, g)` updates element i = first + j given
// its weight-decayed gradient g, loaded as element j of a piece of encoding E (any alignment; the
// decode is fused into the update, so a received payload is read exactly once). Written so the
// compiler vectorises it.
//
// A gradient element is read as 0 + g: -0 becomes +0 and every other value stays what it is, as a
// sum over workers would make it. So a BSP round of one worker can be applied straight from its
// gradient, with the bits of the summed one (Shard::MaybeApplyRound), and the add costs nothing
// in a loop bound by memory. (Only plain SGD could tell: w - lr * (-0) differs from w - lr * (+0)
// when w itself is -0.)
template <TensorEncoding E, typename Rule>
void ApplyElementwise(int64_t first, int64_t n, const char* grad, const float* params,
                      float weight_decay, Rule rule) {
  if (weight_decay == 0.0f) {
    for (int64_t j = 0; j < n; ++j) rule(first + j, 0.0f + LoadElement<E>(grad, j));
  } else {
    for (int64_t j = 0; j < n; ++j) {
      rule(first + j, (0.0f + LoadElement<E>(grad, j)) + weight_decay * params[first + j]);
    }
  }
}

}  // namespace

Optimizer::Optimizer(const OptimizerOptions& options, int64_t size)
    : options_(options), size_(size) {
  assert(ValidateOptimizerOptions(options).ok());
  if (options.kind != OptimizerKind::kSgd) slot0_.assign(size, 0.0f);
  if (options.kind == OptimizerKind::kAdam || options.kind == OptimizerKind::kAdamW) {
    slot1_.assign(size, 0.0f);
  }
}

absl::Status Optimizer::RestoreSlots(std::vector<float> slot0, std::vector<float> slot1) {
  if (slot0.size() != slot0_.size() || slot1.size() != slot1_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer state of ", slot0.size(), "+", slot1.size(), " values does not fit ",
        OptimizerKindName(options_.kind), " over ", size_, " parameters"));
  }
  slot0_ = std::move(slot0);
  slot1_ = std::move(slot1);
  return absl::OkStatus();
}

float Optimizer::LearningRate(int64_t update_index) const {
  const int64_t warmup = options_.warmup_updates;
  if (warmup > 0 && update_index < warmup) {
    return options_.lr * static_cast<float>(update_index + 1) / static_cast<float>(warmup);
  }
  if (options_.schedule == LrSchedule::kCosine && options_.decay_updates > 0) {
    const double progress = std::min(1.0, static_cast<double>(update_index - warmup) /
                                              static_cast<double>(options_.decay_updates - warmup));
    return static_cast<float>(options_.lr * 0.5 * (1.0 + std::cos(M_PI * progress)));
  }
  if (options_.schedule == LrSchedule::kStep) {
    const int64_t decays = (update_index - warmup) / options_.lr_step_updates;
    return static_cast<float>(options_.lr *
                              std::pow(static_cast<double>(options_.lr_step_gamma), decays));
  }
  return options_.lr;
}

void Optimizer::Apply(int64_t update_index, absl::Span<const float> grad, absl::Span<float> params,
                      float lr_scale) {
  Apply(update_index, EncodedTensor::OfFloats(grad), params, lr_scale);
}

void Optimizer::Apply(int64_t update_index, const EncodedTensor& grad, absl::Span<float> params,
                      float lr_scale) {
  assert(grad.dense() && grad.size() == size_ && grad.units() == size_ &&
         static_cast<int64_t>(params.size()) == size_);
  const float lr = LearningRate(update_index) * lr_scale;
  float* w = params.data();
  const float wd = options_.weight_decay;
  const int unit = UnitBytes(grad.encoding());
  // Elements [lo, hi) of every piece: each thread takes one contiguous block of the slice.
  auto apply_block = [&](int64_t lo, int64_t hi) {
    const ScopedFlushDenormals flush;  // on each thread that updates (flush_denormals.h)
    DispatchDense(grad.encoding(), [&](auto encoding) {
      constexpr TensorEncoding E = decltype(encoding)::value;
      for (const PayloadPiece& piece : grad.pieces()) {
        const int64_t first = std::max(lo, piece.first);
        const int64_t n = std::min(hi, piece.first + piece.count) - first;
        if (n <= 0) continue;
        const char* data = piece.data + (first - piece.first) * unit;
        ApplyRange<E>(update_index, lr, wd, first, n, data, w);
      }
    });
  };
  const int threads = ApplyThreads(size_);
  if (threads <= 1) {
    apply_block(0, size_);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t block = (size_ + threads - 1) / threads;
  for (int t = 1; t < threads; ++t) {
    pool.emplace_back(apply_block, t * block, std::min(size_, (t + 1) * block));
  }
  apply_block(0, std::min(size_, block));
  for (std::thread& th : pool) th.join();
}

int Optimizer::ApplyThreads(int64_t n) const {
  // Below this many elements per thread, starting threads costs more than it saves.
  constexpr int64_t kMinElementsPerThread = int64_t{1} << 20;
  // hardware_concurrency() reads /sys on every call (open, read, close): about as long as a
  // small push's whole update, so it is asked once.
  static const int kCores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int threads = options_.apply_threads;
  if (threads <= 0) threads = kCores;
  return static_cast<int>(std::clamp<int64_t>(n / kMinElementsPerThread, 1, threads));
}

template <TensorEncoding E>
void Optimizer::ApplyRange(int64_t update_index, float lr, float wd, int64_t first, int64_t n,
                           const char* data, float* w) {
  switch (options_.kind) {
    case OptimizerKind::kSgd:
      ApplyElementwise<E>(first, n, data, w, wd, [&](int64_t i, float gi) { w[i] -= lr * gi; });
      break;
    case OptimizerKind::kMomentum: {
      float* v = slot0_.data();
      const float mu = options_.momentum;
      ApplyElementwise<E>(first, n, data, w, wd, [&](int64_t i, float gi) {
        v[i] = mu * v[i] + gi;
        w[i] -= lr * v[i];
      });
      break;
    }
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW: {
      float* m = slot0_.data();
      float* v = slot1_.data();
      const float b1 = options_.beta1;
      const float b2 = options_.beta2;
      const double t = static_cast<double>(update_index + 1);
      // Bias corrections folded into the step size and epsilon (Kingma & Ba, section 2).
      const float c1 = static_cast<float>(1.0 - std::pow(static_cast<double>(b1), t));
      const float c2 = static_cast<float>(1.0 - std::pow(static_cast<double>(b2), t));
      const float step = lr / c1;
      const float inv_sqrt_c2 = 1.0f / std::sqrt(c2);
      const float eps = options_.epsilon;
      if (options_.kind == OptimizerKind::kAdamW) {
        // Decoupled weight decay (Loshchilov & Hutter; PyTorch's AdamW): the weights shrink by
        // lr * wd before the Adam step, and the decay never enters the moments.
        const float keep = 1.0f - lr * wd;
        ApplyElementwise<E>(first, n, data, w, 0.0f, [&](int64_t i, float gi) {
          m[i] = b1 * m[i] + (1.0f - b1) * gi;
          v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
          w[i] = w[i] * keep - step * m[i] / (std::sqrt(v[i]) * inv_sqrt_c2 + eps);
        });
        break;
      }
      ApplyElementwise<E>(first, n, data, w, wd, [&](int64_t i, float gi) {
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        w[i] -= step * m[i] / (std::sqrt(v[i]) * inv_sqrt_c2 + eps);
      });
      break;
    }
    case OptimizerKind::kAdagrad: {
      float* sum_of_squares = slot0_.data();
      const float eps = options_.epsilon;
      ApplyElementwise<E>(first, n, data, w, wd, [&](int64_t i, float gi) {
        sum_of_squares[i] += gi * gi;
        w[i] -= lr * gi / (std::sqrt(sum_of_squares[i]) + eps);
      });
      break;
    }
  }
}

double ScaledLr(double lr, int64_t update_batch, int64_t base_batch, LrScaling rule) {
  if (base_batch <= 0) return lr;
  const double ratio = static_cast<double>(update_batch) / static_cast<double>(base_batch);
  return lr * (rule == LrScaling::kSqrt ? std::sqrt(ratio) : ratio);
}

int64_t RunDecayUpdates(int64_t steps, int num_workers, bool one_update_per_step,
                        int64_t warmup_updates) {
  const int64_t updates = one_update_per_step ? steps : steps * num_workers;
  return std::max(updates, warmup_updates + 1);
}

void DelayCompensate(float lambda, absl::Span<const float> g, absl::Span<const float> w_now,
                     absl::Span<const float> w_backup, absl::Span<float> out) {
  assert(g.size() == w_now.size() && g.size() == w_backup.size() && g.size() == out.size());
  for (size_t i = 0; i < g.size(); ++i) {
    out[i] = g[i] + lambda * g[i] * g[i] * (w_now[i] - w_backup[i]);
  }
}

}  // namespace ps
