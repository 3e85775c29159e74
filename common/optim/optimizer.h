#ifndef PS_COMMON_OPTIM_OPTIMIZER_H_
#define PS_COMMON_OPTIM_OPTIMIZER_H_

// The update rules a shard applies to its slice. Every rule is one elementwise pass over the
// slice (see ApplyElementwise in optimizer.cc); the state it needs (momentum buffer, Adam's
// moments) lives in "slots" of the slice's length owned by the Optimizer.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/codec/tensor_codec.h"

namespace ps {

// kAdamW: Adam with decoupled weight decay (weight_decay shrinks the weights by lr * weight_decay
// each update instead of entering the gradient). kAdagrad: acc += g^2; w -= lr * g / (sqrt(acc) +
// epsilon), acc from 0 (PyTorch's Adagrad without lr_decay; Downpour SGD's rule, Dean et al.
// 2012): each parameter's step shrinks with the gradient it has seen.
enum class OptimizerKind { kSgd, kMomentum, kAdam, kAdamW, kAdagrad };
// After warmup the learning rate stays constant; or decays along a half cosine to zero at update
// `decay_updates` (and stays there); or is multiplied by `lr_step_gamma` every `lr_step_updates`
// updates (the step decay of He et al. 2016: x0.1 at fixed epochs).
enum class LrSchedule { kConstant, kCosine, kStep };
// How the peak learning rate follows the samples behind one update when a base batch is given:
// linear, lr x update_batch / base_batch (Goyal et al. 2017, for SGD and momentum); or by the
// square root, lr x sqrt(update_batch / base_batch) (Krizhevsky 2014, Hoffer et al. 2017; the
// rule Malladi et al. 2022 derive for Adam and other adaptive methods); or, `auto`, the rule of
// the optimizer in use (ResolveLrScaling), which is what docs/experiments.md measures to win for
// each: linear for sgd and momentum, the square root for adam, adamw and adagrad.
enum class LrScaling { kLinear, kSqrt, kAuto };

absl::StatusOr<OptimizerKind> ParseOptimizerKind(const std::string& name);
std::string OptimizerKindName(OptimizerKind kind);
// Every kind, in declaration order: what the tests and the apply benchmark cover, so a new rule
// is covered by being named in optimizer.cc's table.
const std::vector<OptimizerKind>& AllOptimizerKinds();
absl::StatusOr<LrSchedule> ParseLrSchedule(const std::string& name);
std::string LrScheduleName(LrSchedule schedule);
absl::StatusOr<LrScaling> ParseLrScaling(const std::string& name);
std::string LrScalingName(LrScaling scaling);
// `rule` itself, or for kAuto the rule that fits `kind`: never kAuto.
LrScaling ResolveLrScaling(LrScaling rule, OptimizerKind kind);

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kSgd;
  float lr = 0.01f;       // peak learning rate
  float momentum = 0.9f;  // kMomentum: v = momentum * v + g; w -= lr * v (PyTorch's form)
  float beta1 = 0.9f;     // kAdam, kAdamW
  float beta2 = 0.999f;   // kAdam, kAdamW
  float epsilon = 1e-8f;  // kAdam, kAdamW, kAdagrad
  // L2 penalty: g += weight_decay * w before the rule (kSgd, kMomentum, kAdam); kAdamW: the
  // decoupled decay w *= 1 - lr * weight_decay.
  float weight_decay = 0.0f;
  int64_t warmup_updates = 0;  // lr ramps linearly from lr/warmup to lr over the first updates
  LrSchedule schedule = LrSchedule::kConstant;
  // kCosine: the update at which lr reaches 0, > warmup_updates; 0: not known yet (the shard
  // sets it from the work its workers declare, see Optimizer::set_decay_updates), and until then
  // the peak rate applies.
  int64_t decay_updates = 0;
  // kStep: after warmup, update u has lr * lr_step_gamma^floor((u - warmup_updates) /
  // lr_step_updates); lr_step_updates > 0 and lr_step_gamma in (0, 1].
  int64_t lr_step_updates = 0;
  float lr_step_gamma = 0.1f;
  // Threads of one update: a slice of n elements is cut into min(n / 2^20, apply_threads)
  // contiguous blocks updated in parallel. 0: the machine's hardware threads.
  int apply_threads = 0;
};

// Fails with INVALID_ARGUMENT naming the field when an option is out of range.
absl::Status ValidateOptimizerOptions(const OptimizerOptions& options);

class Optimizer {
 public:
  // `size` elements of state per slot. Options must be valid.
  Optimizer(const OptimizerOptions& options, int64_t size);

  // Applies one update with `grad` to `params` (both of size()); `update_index` is the number of
  // updates applied before this one (the shard's version), which drives warmup and Adam's bias
  // correction. `lr_scale` multiplies this update's learning rate (staleness-aware rules).
  void Apply(int64_t update_index, absl::Span<const float> grad, absl::Span<float> params,
             float lr_scale = 1.0f);
  // The same with a dense encoded gradient (float32, bf16 or fp16 pieces as received), decoded
  // inside the update loop.
  void Apply(int64_t update_index, const EncodedTensor& grad, absl::Span<float> params,
             float lr_scale = 1.0f);

  // The learning rate of update number `update_index` (0-based).
  float LearningRate(int64_t update_index) const;
  const OptimizerOptions& options() const { return options_; }
  // Fixes the cosine schedule's end once the run's length is known; must be > warmup_updates.
  void set_decay_updates(int64_t decay_updates) { options_.decay_updates = decay_updates; }
  int64_t size() const { return size_; }

  // The optimizer's state, for checkpoints: slot0 is the momentum buffer, Adam's first moment or
  // AdaGrad's sum of squares, slot1 Adam's second moment; each is empty or size() long, as the
  // kind needs.
  absl::Span<const float> slot0() const { return slot0_; }
  absl::Span<const float> slot1() const { return slot1_; }
  // INVALID_ARGUMENT (and nothing changed) when a slot's length does not fit the kind and size.
  absl::Status RestoreSlots(std::vector<float> slot0, std::vector<float> slot1);

 private:
  int ApplyThreads(int64_t n) const;
  // The rule over elements [first, first + n), the gradient read from `data` in encoding E.
  template <TensorEncoding E>
  void ApplyRange(int64_t update_index, float lr, float wd, int64_t first, int64_t n,
                  const char* data, float* w);

  OptimizerOptions options_;
  int64_t size_;
  std::vector<float> slot0_;  // momentum buffer, Adam's first moment or AdaGrad's sum of squares
  std::vector<float> slot1_;  // Adam's second moment
};

// `lr` scaled by `rule` from `base_batch` to `update_batch`, the number of samples behind one
// update. base_batch <= 0 leaves lr as is. `rule` is resolved (kLinear or kSqrt).
double ScaledLr(double lr, int64_t update_batch, int64_t base_batch, LrScaling rule);

// The update at which a cosine schedule reaches zero for a run of `steps` steps per worker:
// the run's last update (one per step under BSP, whose rounds combine the workers; one per
// push otherwise), and never at or before the warmup's end.
int64_t RunDecayUpdates(int64_t steps, int num_workers, bool one_update_per_step,
                        int64_t warmup_updates);

// Delay compensation of DC-ASGD (Zheng et al., ICML 2017): a gradient computed at w_backup and
// applied at w_now is corrected by a first-order Taylor term with the diagonal outer-product
// approximation of the Hessian: out = g + lambda * g * g * (w_now - w_backup), elementwise.
// All spans have the same length; out may alias g.
void DelayCompensate(float lambda, absl::Span<const float> g, absl::Span<const float> w_now,
                     absl::Span<const float> w_backup, absl::Span<float> out);

}  // namespace ps

#endif  // PS_COMMON_OPTIM_OPTIMIZER_H_
