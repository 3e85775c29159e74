#ifndef PS_WORKER_REPLAY_H_
#define PS_WORKER_REPLAY_H_

// Deterministic replay of an SSP or ASP run on one machine. The shards' update records
// (ps_server --record_updates) give, per shard, the order in which it applied gradients and the
// version each was computed from; the replay recomputes every gradient with StepGradient at exactly
// those weights and applies them in exactly that order, so it reproduces the run's final weights
// bit for bit. Supports the plain update rule (what the records describe completely).

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/data/dataset.h"
#include "common/device/device.h"
#include "common/nn/model.h"
#include "common/optim/optimizer.h"

namespace ps {

struct ReplayOptions {
  std::vector<std::string> record_paths;  // one per shard, in shard order
  int num_workers = 1;
  int batch_size = 32;
  int accumulate = 1;
  uint64_t seed = 1;
  OptimizerOptions optimizer;  // as the shards ran it (peak lr after any scaling)
};

struct ReplayResult {
  std::vector<float> weights;  // the whole flat buffer after the last update
  int64_t updates = 0;         // applied, over all shards
  int64_t gradients = 0;       // computed (one per worker step)
};

// DATA_LOSS for a malformed or inconsistent record; INVALID_ARGUMENT for bad options.
absl::StatusOr<ReplayResult> Replay(const ReplayOptions& options, Model& model, Device& device,
                                    const Dataset& train);

}  // namespace ps

#endif  // PS_WORKER_REPLAY_H_
