#include "worker/batch_plan.h"

#include <cassert>

#include "absl/strings/str_cat.h"
#include "common/base/random.h"

namespace ps {

absl::StatusOr<BatchPlan> BatchPlan::Create(const BatchPlanOptions& o) {
  if (o.num_workers < 1 || o.rank < 0 || o.rank >= o.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", o.rank, " is not in [0, ", o.num_workers, ")"));
  }
  if (o.batch_size < 1) return absl::InvalidArgumentError("batch_size must be >= 1");
  if (o.accumulate < 1) return absl::InvalidArgumentError("accumulate must be >= 1");
  if (o.dataset_size > INT32_MAX) return absl::InvalidArgumentError("data set too large");
  const int64_t global = int64_t{o.num_workers} * o.accumulate * o.batch_size;
  if (o.dataset_size < global) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the data set has ", o.dataset_size, " samples, fewer than one global batch of ", global));
  }
  return BatchPlan(o);
}

BatchPlan::BatchPlan(const BatchPlanOptions& options)
    : options_(options),
      global_batch_(int64_t{options.num_workers} * options.accumulate * options.batch_size),
      steps_per_epoch_(options.dataset_size / global_batch_) {}

void BatchPlan::MicroBatch(int64_t step, int micro, std::vector<int32_t>* out) {
  assert(step >= 0 && micro >= 0 && micro < options_.accumulate);
  const int64_t epoch = step / steps_per_epoch_;
  const int64_t batch_in_epoch = step % steps_per_epoch_;
  if (epoch != cached_epoch_) {
    Rng rng = Rng::FromKeys({options_.seed, static_cast<uint64_t>(epoch), 0x5a3d});
    permutation_ = Permutation(static_cast<int32_t>(options_.dataset_size), rng);
    cached_epoch_ = epoch;
  }
  const int64_t share = int64_t{options_.accumulate} * options_.batch_size;
  const int64_t begin =
      batch_in_epoch * global_batch_ + options_.rank * share + int64_t{micro} * options_.batch_size;
  out->assign(permutation_.begin() + begin, permutation_.begin() + begin + options_.batch_size);
}

}  // namespace ps
