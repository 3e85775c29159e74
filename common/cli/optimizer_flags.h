#ifndef PS_COMMON_CLI_OPTIMIZER_FLAGS_H_
#define PS_COMMON_CLI_OPTIMIZER_FLAGS_H_

// The optimizer's command-line flags, shared by the binaries that run an optimizer (ps_server
// and ps_replay) so that both read them the same way. For main() files only.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/optim/optimizer.h"

namespace ps {

// --optimizer --lr --momentum --beta1 --beta2 --epsilon --weight_decay --warmup_updates
// --lr_schedule --decay_updates --lr_step_updates --lr_step_gamma --base_batch --lr_scaling
// --effective_batch,
// validated.
absl::StatusOr<OptimizerOptions> OptimizerOptionsFromFlags();

}  // namespace ps

#endif  // PS_COMMON_CLI_OPTIMIZER_FLAGS_H_
