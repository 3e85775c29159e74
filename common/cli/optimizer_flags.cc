#include "common/cli/optimizer_flags.h"

#include "absl/flags/flag.h"
#include "common/base/status_macros.h"

ABSL_FLAG(std::string, optimizer, "adam",
          "Update rule: sgd, momentum, adam, adamw (Adam with decoupled --weight_decay) or "
          "adagrad.");
ABSL_FLAG(double, lr, 0.001, "Learning rate (peak, after warmup).");
ABSL_FLAG(double, momentum, 0.9, "Momentum coefficient (--optimizer momentum).");
ABSL_FLAG(double, beta1, 0.9, "Adam beta1.");
ABSL_FLAG(double, beta2, 0.999, "Adam beta2.");
ABSL_FLAG(double, epsilon, 1e-8, "Adam's and AdaGrad's epsilon.");
ABSL_FLAG(double, weight_decay, 0.0,
          "Weight decay: an L2 penalty added to the gradient (sgd, momentum, adam, adagrad), or "
          "adamw's decoupled decay (the weights shrink by lr x weight_decay per update).");
ABSL_FLAG(std::string, lr_schedule, "cosine",
          "After warmup: constant, cosine (decays to 0 at --decay_updates), or step (multiplied "
          "by --lr_step_gamma every --lr_step_updates updates).");
ABSL_FLAG(int64_t, decay_updates, 0,
          "Cosine schedule: the update (shard version) where lr is 0; 0: the run's last update, "
          "from the steps the workers declare (one update per step under BSP, per push "
          "otherwise).");
ABSL_FLAG(int64_t, lr_step_updates, 0,
          "Step schedule: updates (shard versions) between two decays, counted from the warmup's "
          "end; e.g. one epoch's updates times 30.");
ABSL_FLAG(double, lr_step_gamma, 0.1, "Step schedule: the factor of each decay, in (0, 1].");
ABSL_FLAG(int64_t, base_batch, 0,
          "Learning-rate scaling: when > 0, the peak learning rate is --lr scaled by "
          "--lr_scaling from this batch to --effective_batch.");
ABSL_FLAG(std::string, lr_scaling, "auto",
          "With --base_batch: linear (lr x effective / base; Goyal et al. 2017, for SGD), sqrt "
          "(lr x sqrt(effective / base); the rule for Adam and AdaGrad, Malladi et al. 2022) or "
          "auto (the --optimizer's own: linear for sgd and momentum, sqrt for the others).");
ABSL_FLAG(int64_t, effective_batch, 0,
          "Samples behind one update: per-worker batch x accumulation x the pushes a round "
          "averages (BSP: workers less backup workers) or per-worker batch x accumulation "
          "(SSP/ASP, one push per update); ps_launch sets it.");
ABSL_FLAG(int64_t, warmup_updates, 0, "Linear learning-rate warmup over this many updates.");
ABSL_FLAG(int32_t, apply_threads, 0,
          "Threads of one update of a large slice (blocks of at least 2^20 elements); 0: all "
          "hardware threads.");

namespace ps {

absl::StatusOr<OptimizerOptions> OptimizerOptionsFromFlags() {
  OptimizerOptions o;
  auto kind = ParseOptimizerKind(absl::GetFlag(FLAGS_optimizer));
  if (!kind.ok()) return kind.status();
  o.kind = *kind;
  o.lr = static_cast<float>(absl::GetFlag(FLAGS_lr));
  o.momentum = static_cast<float>(absl::GetFlag(FLAGS_momentum));
  o.beta1 = static_cast<float>(absl::GetFlag(FLAGS_beta1));
  o.beta2 = static_cast<float>(absl::GetFlag(FLAGS_beta2));
  o.epsilon = static_cast<float>(absl::GetFlag(FLAGS_epsilon));
  o.weight_decay = static_cast<float>(absl::GetFlag(FLAGS_weight_decay));
  o.warmup_updates = absl::GetFlag(FLAGS_warmup_updates);
  o.apply_threads = absl::GetFlag(FLAGS_apply_threads);
  const int64_t base_batch = absl::GetFlag(FLAGS_base_batch);
  if (base_batch < 0) return absl::InvalidArgumentError("--base_batch must be >= 0");
  ASSIGN_OR_RETURN(const LrScaling chosen, ParseLrScaling(absl::GetFlag(FLAGS_lr_scaling)));
  const LrScaling scaling = ResolveLrScaling(chosen, o.kind);
  if (base_batch > 0) {
    const int64_t effective = absl::GetFlag(FLAGS_effective_batch);
    if (effective <= 0) {
      return absl::InvalidArgumentError("--base_batch needs --effective_batch > 0");
    }
    o.lr = static_cast<float>(ScaledLr(o.lr, effective, base_batch, scaling));
  }
  auto schedule = ParseLrSchedule(absl::GetFlag(FLAGS_lr_schedule));
  if (!schedule.ok()) return schedule.status();
  o.schedule = *schedule;
  o.decay_updates = absl::GetFlag(FLAGS_decay_updates);
  o.lr_step_updates = absl::GetFlag(FLAGS_lr_step_updates);
  o.lr_step_gamma = static_cast<float>(absl::GetFlag(FLAGS_lr_step_gamma));
  RETURN_IF_ERROR(ValidateOptimizerOptions(o));
  return o;
}

}  // namespace ps
