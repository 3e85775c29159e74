#ifndef PS_WORKER_STEP_GRADIENT_H_
#define PS_WORKER_STEP_GRADIENT_H_

// The gradient of one training step of one rank: the mean over its `accumulate` micro-batches of
// global batch `step` (see BatchPlan), at given weights. The trainer and ps_replay both compute
// gradients through this one class, so a replay reproduces a run's gradients bit for bit.

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/data/dataset.h"
#include "common/device/device.h"
#include "common/nn/model.h"
#include "common/nn/sparse_lookup.h"
#include "worker/batch_plan.h"

namespace ps {

class StepGradient {
 public:
  // `model`, `device` and `train` must outlive the object. INVALID_ARGUMENT when the plan does not
  // fit the data or the batch does not fit the model.
  //
  // `overlap_copies` (on a device whose async copies run beside its ops, see
  // Device::overlaps_copies): each layer's weights go to the device on the copy stream and the
  // layer's forward waits for its own weights only, and each layer's gradient comes back on the
  // copy stream as soon as the last micro-batch's backward has produced it, while the layers below
  // are still computing. Off: one copy of all weights before the step and one of the whole
  // gradient after it, both on the op stream. The results are the same bits either way.
  static absl::StatusOr<std::unique_ptr<StepGradient>> Create(Model& model, Device& device,
                                                              const Dataset& train,
                                                              const BatchPlanOptions& plan,
                                                              bool overlap_copies = true);

  // Copies `params` (host, the model's layout) to the device, runs forward and backward over the
  // step's micro-batches and writes the mean gradient to `grads` (host). Returns the batch's
  // loss and accuracy sums.
  absl::StatusOr<BatchStats> Compute(int64_t step, absl::Span<const float> params,
                                     absl::Span<float> grads);

  // Priority scheduling: the same, layer by layer. `weights_ready(range)` is called before a
  // layer's weights are first read from `params` (it may wait for them to arrive); each layer's
  // weights are copied to the device just then. `gradient_ready(range)` is called once a layer's
  // gradient of the whole step is in `grads` (after the last micro-batch's backward of that
  // layer), last layer first. With overlapping copies, the callbacks come once the copy of that
  // layer's gradient is done, after every kernel of the step has been issued.
  struct LayerCallbacks {
    std::function<absl::Status(KeyRange)> weights_ready;
    std::function<absl::Status(KeyRange)> gradient_ready;
  };
  absl::StatusOr<BatchStats> ComputeByLayer(int64_t step, absl::Span<const float> params,
                                            absl::Span<float> grads,
                                            const LayerCallbacks& callbacks);

  // Models with a sparse table: the keys step `step` looks up, deduplicated over its
  // micro-batches (the last three steps asked are kept; the reference stays valid until three
  // other steps have been asked for). The worker pulls their rows before Compute and pushes
  // their gradients after.
  const std::vector<uint64_t>& StepKeys(int64_t step);
  // Compute with the step's rows: `rows` (StepKeys(step).size() x dim, host, in key order) are
  // read; `row_grads` (the same shape) receives the mean over the micro-batches of the loss's
  // gradient with respect to each row.
  absl::StatusOr<BatchStats> Compute(int64_t step, absl::Span<const float> params,
                                     absl::Span<float> grads, absl::Span<const float> rows,
                                     absl::Span<float> row_grads);

  const BatchPlan& plan() const { return plan_; }

  // Global gradient-norm clipping (0: off): Compute scales the step's whole gradient (dense and
  // rows) so that its L2 norm is at most `max_norm`, and reports the norm before
  // (BatchStats::grad_norm). ComputeByLayer sends layers before the norm is known: it does not
  // clip (the trainer refuses the combination).
  void set_clip_norm(double max_norm) { clip_norm_ = max_norm; }
  double clip_norm() const { return clip_norm_; }

 private:
  // Scales both to a joint L2 norm of at most clip_norm_; returns the norm before.
  double ClipGradient(absl::Span<float> grads, absl::Span<float> row_grads) const;
  double clip_norm_ = 0;
  StepGradient(Model& model, Device& device, const Dataset& train, BatchPlan plan, int batch,
               int accumulate, bool overlap_copies)
      : model_(model),
        device_(device),
        train_(train),
        plan_(std::move(plan)),
        batch_(batch),
        accumulate_(accumulate),
        overlap_copies_(overlap_copies && device.overlaps_copies() && !device.host_addressable()),
        layer_ranges_(model.LayerParamRanges()) {}

  Model& model_;
  Device& device_;
  const Dataset& train_;
  BatchPlan plan_;
  int batch_;
  int accumulate_;
  bool overlap_copies_;
  std::vector<KeyRange> layer_ranges_;  // the layers' parameters, forward order
  // Both entry points: `hooks_for(micro)` gives the model's hooks of micro-batch `micro` (none:
  // the whole gradient is copied to `grads` after, unless `grads_dev` is `grads` itself). The
  // model reads `params_dev` and accumulates into `grads_dev` (device memory, or host memory on
  // a host-addressable device).
  // The batches' loss and accuracy sums stay on the device (so no batch waits for the one
  // before it); `read_sums` adds them to the result before returning, else AddSums does later.
  absl::StatusOr<BatchStats> Run(int64_t step, const std::function<LayerHooks(int)>* hooks_for,
                                 const float* params_dev, float* grads_dev, absl::Span<float> grads,
                                 bool read_sums = true);
  absl::Status AddSums(BatchStats* stats);
  // ComputeByLayer with every copy on the device's copy stream (overlap_copies_).
  absl::StatusOr<BatchStats> RunOverlapped(int64_t step, absl::Span<const float> params,
                                           absl::Span<float> grads,
                                           const LayerCallbacks& callbacks);
  // The index in layer_ranges_ of the layer whose parameters are `range`.
  size_t LayerOf(KeyRange range) const;
  DeviceBuffer params_dev_, grads_dev_, x_dev_, y_dev_;
  DeviceBuffer x_host_, y_host_;  // the device's preferred host memory (pinned for CUDA)
  // (loss, correct) of each micro-batch of the step.
  DeviceBuffer sums_dev_, sums_host_;
  std::vector<int32_t> indices_;
  // Sparse models: one step's lookups, per micro-batch (SparseBatch's lookups and its grouping
  // by row), over the step's unique keys.
  struct StepLookups {
    int64_t step = -1;
    int64_t last_use = 0;  // when it was last asked for (uses_)
    std::vector<uint64_t> unique_keys;
    std::vector<std::vector<int32_t>> lookups, offsets, positions;  // per micro-batch
  };
  const StepLookups& LookupsOf(int64_t step);
  // The three steps asked for last: the step that computes and the (at most two) later steps
  // whose rows a double-buffered schedule pulls ahead of it. The one used least recently makes
  // room: not the lowest step, since a worker that registers again goes back to an earlier step
  // while later ones are still cached.
  StepLookups lookups_[3];
  int64_t uses_ = 0;
  int fields_ = 0;   // keys per sample; 0: a dense model
  int64_t dim_ = 0;  // the table's row width
  DeviceBuffer rows_dev_, row_grads_dev_, lookups_dev_, offsets_dev_, positions_dev_;
  std::vector<float> row_grads_micro_;  // a micro-batch's row gradients, on the host
  // Run's sparse part for micro-batch `micro`: its lookups on the device, bound to the model.
  absl::Status BindMicroBatch(const StepLookups& lookups, int micro, SparseBatch* batch);
  // Adds micro-batch `micro`'s row gradients (on the device) to the step's (host); the first
  // micro-batch's are copied over whatever was there.
  absl::Status AddRowGradients(int micro);
  absl::Span<const float> sparse_rows_;  // the rows of the step being computed (host)
  absl::Span<float> sparse_row_grads_;   // where its row gradients go (host)
};

}  // namespace ps

#endif  // PS_WORKER_STEP_GRADIENT_H_
