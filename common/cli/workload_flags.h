#ifndef PS_COMMON_CLI_WORKLOAD_FLAGS_H_
#define PS_COMMON_CLI_WORKLOAD_FLAGS_H_

// The flags that say what is trained, defined once for ps_worker, ps_replay, ps_launch (which
// passes them all on: ForwardedFlagsOf("common/cli/workload_flags.cc")) and the training bench:
// --data, --train_limit, --test_limit, --model, --hidden, --embedding_dim, --layers, --heads,
// --dim, --context, --batch_size, --accumulate, --epochs, --steps, --seed. For main() files only.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/data/data_registry.h"
#include "common/nn/model_registry.h"

namespace ps {

struct Workload {
  DataSpec data;
  ModelSpec model;
  bool skip_bad_lines = false;
  int64_t train_limit = 0;  // samples; 0: all
  int64_t test_limit = 0;
  int batch_size = 32;  // per micro-batch
  int accumulate = 1;   // micro-batches per push
  int epochs = 5;
  int64_t steps = 0;  // global steps instead of epochs; 0: epochs
  uint64_t seed = 1;
  int context = 64;  // a language model's window, in tokens (text data)
};

// The flags' values, checked: INVALID_ARGUMENT naming the flag for an unknown data kind or model,
// a bad width, or a batch size, accumulation or epoch count below 1.
absl::StatusOr<Workload> WorkloadFromFlags();

// `split` of the workload's data, cut to its limit.
absl::StatusOr<std::unique_ptr<Dataset>> OpenWorkloadData(const Workload& workload, Split split);

}  // namespace ps

#endif  // PS_COMMON_CLI_WORKLOAD_FLAGS_H_
