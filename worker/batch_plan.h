#ifndef PS_WORKER_BATCH_PLAN_H_
#define PS_WORKER_BATCH_PLAN_H_

// Which samples each worker trains on at each step: a pure function of (seed, rank, step), so a
// restarted worker recomputes exactly the samples it would have used.
//
// Epoch e visits the training set in one permutation fixed by (seed, e). Its global batch g is
// the contiguous run perm[g*G, (g+1)*G) with G = num_workers * accumulate * batch_size, whatever
// the number of workers; rank r takes the r-th contiguous share of accumulate * batch_size
// samples, cut into `accumulate` micro-batches of batch_size. The last partial global batch of an
// epoch is dropped, so every step has the same size.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace ps {

struct BatchPlanOptions {
  int64_t dataset_size = 0;
  int num_workers = 1;
  int rank = 0;
  int batch_size = 32;  // per worker and per micro-batch
  int accumulate = 1;   // micro-batches per step
  uint64_t seed = 1;
};

class BatchPlan {
 public:
  // INVALID_ARGUMENT when the options are inconsistent or the data set is smaller than one
  // global batch.
  static absl::StatusOr<BatchPlan> Create(const BatchPlanOptions& options);

  int64_t global_batch() const { return global_batch_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  // Writes the sample indices of micro-batch `micro` (0 <= micro < accumulate) of global step
  // `step` (counted from the start of training) into `out` (batch_size entries).
  void MicroBatch(int64_t step, int micro, std::vector<int32_t>* out);

 private:
  explicit BatchPlan(const BatchPlanOptions& options);
  BatchPlanOptions options_;
  int64_t global_batch_;
  int64_t steps_per_epoch_;
  int64_t cached_epoch_ = -1;
  std::vector<int32_t> permutation_;
};

}  // namespace ps

#endif  // PS_WORKER_BATCH_PLAN_H_
