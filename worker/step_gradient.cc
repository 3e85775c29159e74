#include "worker/step_gradient.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace ps {

absl::StatusOr<std::unique_ptr<StepGradient>> StepGradient::Create(Model& model, Device& device,
                                                                   const Dataset& train,
                                                                   const BatchPlanOptions& options,
                                                                   bool overlap_copies) {
  if (options.batch_size > model.max_batch()) {
    return absl::InvalidArgumentError("batch_size exceeds the model's max_batch");
  }
  if (train.features() != model.input_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the data has ", train.features(), " features, the model takes ", model.input_size()));
  }
  if (train.shape().labels != model.labels_per_sample()) {
    return absl::InvalidArgumentError(absl::StrCat("the data has ", train.shape().labels,
                                                   " labels per sample, the model takes ",
                                                   model.labels_per_sample()));
  }
  ASSIGN_OR_RETURN(BatchPlan plan, BatchPlan::Create(options));
  std::unique_ptr<StepGradient> g(new StepGradient(model, device, train, std::move(plan),
                                                   options.batch_size, options.accumulate,
                                                   overlap_copies));
  const int64_t n = model.layout().total();
  const int64_t features = train.features();
  ASSIGN_OR_RETURN(g->params_dev_, device.Allocate(n * sizeof(float)));
  ASSIGN_OR_RETURN(g->grads_dev_, device.Allocate(n * sizeof(float)));
  ASSIGN_OR_RETURN(g->x_dev_, device.Allocate(sizeof(float) * g->batch_ * features));
  const int64_t labels = int64_t{g->batch_} * train.shape().labels;
  ASSIGN_OR_RETURN(g->y_dev_, device.Allocate(sizeof(int32_t) * labels));
  ASSIGN_OR_RETURN(g->x_host_, device.AllocateHost(sizeof(float) * g->batch_ * features));
  ASSIGN_OR_RETURN(g->y_host_, device.AllocateHost(sizeof(int32_t) * labels));
  ASSIGN_OR_RETURN(g->sums_dev_, device.Allocate(2 * sizeof(double) * g->accumulate_));
  ASSIGN_OR_RETURN(g->sums_host_, device.AllocateHost(2 * sizeof(double) * g->accumulate_));
  const std::vector<SparseTableSpec>& tables = model.description().sparse();
  if (tables.size() > 1) {
    return absl::UnimplementedError("models with more than one sparse table");
  }
  if (!tables.empty()) {
    if (train.keys_per_sample() < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("model ", model.name(), " looks up sparse keys; the data has none"));
    }
    g->fields_ = train.keys_per_sample();
    g->dim_ = tables[0].dim;
    g->overlap_copies_ = false;  // the rows are copied whole before the step
    const int64_t lookups = int64_t{g->batch_} * g->fields_;
    const int64_t max_unique = lookups * g->accumulate_;
    ASSIGN_OR_RETURN(g->rows_dev_, device.Allocate(sizeof(float) * max_unique * g->dim_));
    ASSIGN_OR_RETURN(g->row_grads_dev_, device.Allocate(sizeof(float) * max_unique * g->dim_));
    ASSIGN_OR_RETURN(g->lookups_dev_, device.Allocate(sizeof(int32_t) * lookups));
    ASSIGN_OR_RETURN(g->offsets_dev_, device.Allocate(sizeof(int32_t) * (max_unique + 1)));
    ASSIGN_OR_RETURN(g->positions_dev_, device.Allocate(sizeof(int32_t) * lookups));
  }
  return g;
}

const StepGradient::StepLookups& StepGradient::LookupsOf(int64_t step) {
  ++uses_;
  for (StepLookups& l : lookups_) {
    if (l.step == step) {
      l.last_use = uses_;
      return l;
    }
  }
  StepLookups& l = *std::min_element(
      std::begin(lookups_), std::end(lookups_),
      [](const StepLookups& a, const StepLookups& b) { return a.last_use < b.last_use; });
  l.last_use = uses_;
  const int64_t per_micro = int64_t{batch_} * fields_;
  std::vector<uint64_t> keys(per_micro * accumulate_);
  for (int micro = 0; micro < accumulate_; ++micro) {
    plan_.MicroBatch(step, micro, &indices_);
    train_.GatherKeys(indices_.data(), batch_, keys.data() + micro * per_micro);
  }
  SparseLookups all = DeduplicateKeys(keys.data(), static_cast<int64_t>(keys.size()));
  const size_t unique = all.unique_keys.size();
  l.step = step;
  l.unique_keys = std::move(all.unique_keys);
  l.lookups.assign(accumulate_, {});
  l.offsets.assign(accumulate_, std::vector<int32_t>(unique + 1, 0));
  l.positions.assign(accumulate_, std::vector<int32_t>(per_micro));
  for (int micro = 0; micro < accumulate_; ++micro) {
    const int64_t first = micro * per_micro;
    l.lookups[micro].assign(all.lookups.begin() + first, all.lookups.begin() + first + per_micro);
    // The micro-batch's lookups grouped by row: a counting sort keeps each row's in order.
    std::vector<int32_t>& offsets = l.offsets[micro];
    for (int32_t row : l.lookups[micro]) ++offsets[row + 1];
    for (size_t u = 0; u < unique; ++u) offsets[u + 1] += offsets[u];
    std::vector<int32_t> next(offsets.begin(), offsets.end() - 1);
    for (int64_t p = 0; p < per_micro; ++p) {
      l.positions[micro][next[l.lookups[micro][p]]++] = static_cast<int32_t>(p);
    }
  }
  return l;
}

const std::vector<uint64_t>& StepGradient::StepKeys(int64_t step) {
  return LookupsOf(step).unique_keys;
}

absl::StatusOr<BatchStats> StepGradient::Compute(int64_t step, absl::Span<const float> params,
                                                 absl::Span<float> grads,
                                                 absl::Span<const float> rows,
                                                 absl::Span<float> row_grads) {
  if (fields_ == 0) return absl::FailedPreconditionError("a dense model has no rows");
  const size_t expected = LookupsOf(step).unique_keys.size() * dim_;
  if (rows.size() != expected || row_grads.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("step ", step, " has ", expected / dim_,
                                                   " rows of ", dim_, "; got ", rows.size(),
                                                   " and ", row_grads.size(), " values"));
  }
  sparse_rows_ = rows;
  sparse_row_grads_ = row_grads;
  absl::StatusOr<BatchStats> stats = Compute(step, params, grads);
  sparse_rows_ = {};
  sparse_row_grads_ = {};
  model_.BindSparse(nullptr);
  return stats;
}

absl::Status StepGradient::BindMicroBatch(const StepLookups& l, int micro, SparseBatch* batch) {
  const auto copy = [&](const std::vector<int32_t>& v, DeviceBuffer& to) {
    return device_.CopyToDevice(v.data(), v.size() * sizeof(int32_t), to.as<int32_t>());
  };
  RETURN_IF_ERROR(copy(l.lookups[micro], lookups_dev_));
  RETURN_IF_ERROR(copy(l.offsets[micro], offsets_dev_));
  RETURN_IF_ERROR(copy(l.positions[micro], positions_dev_));
  *batch = SparseBatch{rows_dev_.as<float>(),        static_cast<int64_t>(l.unique_keys.size()),
                       lookups_dev_.as<int32_t>(),   offsets_dev_.as<int32_t>(),
                       positions_dev_.as<int32_t>(), row_grads_dev_.as<float>()};
  model_.BindSparse(batch);
  return absl::OkStatus();
}

absl::StatusOr<BatchStats> StepGradient::Compute(int64_t step, absl::Span<const float> params,
                                                 absl::Span<float> grads) {
  if (fields_ > 0 && sparse_rows_.data() == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("model ", model_.name(), " needs the step's rows (Compute with rows)"));
  }
  absl::StatusOr<BatchStats> stats;
  if (device_.host_addressable()) {
    // Host memory is the device's own: forward reads `params`, backward writes `grads` in place.
    stats = Run(step, nullptr, params.data(), grads.data(), grads);
  } else if (overlap_copies_) {
    stats = RunOverlapped(step, params, grads, LayerCallbacks());
  } else {
    RETURN_IF_ERROR(device_.CopyToDevice(params.data(), model_.layout().total() * sizeof(float),
                                         params_dev_.as<float>()));
    stats = Run(step, nullptr, params_dev_.as<float>(), grads_dev_.as<float>(), grads);
  }
  if (stats.ok() && clip_norm_ > 0) stats->grad_norm = ClipGradient(grads, sparse_row_grads_);
  return stats;
}

namespace {

// The sum of squares in double, in 8 interleaved partial sums (element i into sum i % 8, added in
// order at the end): independent chains that the compiler vectorises, in a fixed order.
double SumOfSquares(absl::Span<const float> x) {
  constexpr size_t kWays = 8;
  double partial[kWays] = {};
  size_t i = 0;
  for (; i + kWays <= x.size(); i += kWays) {
    for (size_t k = 0; k < kWays; ++k) partial[k] += static_cast<double>(x[i + k]) * x[i + k];
  }
  double sum = 0;
  for (double p : partial) sum += p;
  for (; i < x.size(); ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

}  // namespace

double StepGradient::ClipGradient(absl::Span<float> grads, absl::Span<float> row_grads) const {
  const double norm = std::sqrt(SumOfSquares(grads) + SumOfSquares(row_grads));
  if (norm > clip_norm_) {
    const float scale = static_cast<float>(clip_norm_ / norm);
    for (float& g : grads) g *= scale;
    for (float& g : row_grads) g *= scale;
  }
  return norm;
}

absl::StatusOr<BatchStats> StepGradient::ComputeByLayer(int64_t step,
                                                        absl::Span<const float> params,
                                                        absl::Span<float> grads,
                                                        const LayerCallbacks& callbacks) {
  if (overlap_copies_) return RunOverlapped(step, params, grads, callbacks);
  float* params_dev = params_dev_.as<float>();
  float* grads_dev = grads_dev_.as<float>();
  const int last = accumulate_ - 1;
  const std::function<LayerHooks(int)> hooks_for = [&](int micro) {
    LayerHooks hooks;
    if (micro == 0) {
      hooks.before_forward = [&](KeyRange r) -> absl::Status {
        if (callbacks.weights_ready) RETURN_IF_ERROR(callbacks.weights_ready(r));
        return device_.CopyToDevice(params.data() + r.begin, r.size() * sizeof(float),
                                    params_dev + r.begin);
      };
    }
    if (micro == last) {
      hooks.after_backward = [&](KeyRange r) -> absl::Status {
        RETURN_IF_ERROR(device_.CopyToHost(grads_dev + r.begin, r.size() * sizeof(float),
                                           grads.data() + r.begin));
        return callbacks.gradient_ready ? callbacks.gradient_ready(r) : absl::OkStatus();
      };
    }
    return hooks;
  };
  return Run(step, &hooks_for, params_dev, grads_dev, grads);
}

size_t StepGradient::LayerOf(KeyRange range) const {
  size_t layer = 0;
  while (layer + 1 < layer_ranges_.size() && layer_ranges_[layer].begin != range.begin) ++layer;
  return layer;
}

absl::StatusOr<BatchStats> StepGradient::RunOverlapped(int64_t step, absl::Span<const float> params,
                                                       absl::Span<float> grads,
                                                       const LayerCallbacks& callbacks) {
  float* params_dev = params_dev_.as<float>();
  float* grads_dev = grads_dev_.as<float>();
  // No op of this step reads params_dev before its layer waits for the copy, and the last step
  // ended with Synchronize(), so the weights may be copied without waiting for any op. When they
  // are all here (no weights_ready to wait for), every layer's copy starts with the first
  // layer's forward.
  std::vector<Device::CopyTicket> weights_copied(layer_ranges_.size(), -1);
  const auto copy_weights = [&](size_t layer) -> absl::Status {
    const KeyRange r = layer_ranges_[layer];
    ASSIGN_OR_RETURN(weights_copied[layer],
                     device_.CopyToDeviceAsync(params.data() + r.begin, r.size() * sizeof(float),
                                               params_dev + r.begin, /*after_ops=*/false));
    return absl::OkStatus();
  };
  const bool copy_all_now = !callbacks.weights_ready;
  struct GradientCopy {
    KeyRange range;
    Device::CopyTicket ticket;
  };
  std::vector<GradientCopy> gradients_copied;  // last layer first
  const int last = accumulate_ - 1;
  const std::function<LayerHooks(int)> hooks_for = [&](int micro) {
    LayerHooks hooks;
    if (micro == 0) {
      hooks.before_forward = [&](KeyRange r) -> absl::Status {
        const size_t layer = LayerOf(r);
        if (!copy_all_now) {
          RETURN_IF_ERROR(callbacks.weights_ready(r));
          RETURN_IF_ERROR(copy_weights(layer));
        } else if (layer == 0) {
          // Here, not before the step: the copy stream runs in order, and the first batch went
          // in just now, so the first layer waits for its weights and that batch only.
          for (size_t l = 0; l < layer_ranges_.size(); ++l) RETURN_IF_ERROR(copy_weights(l));
        }
        return device_.OpsWaitFor(weights_copied[layer]);
      };
    }
    if (micro == last) {
      hooks.after_backward = [&](KeyRange r) -> absl::Status {
        ASSIGN_OR_RETURN(const Device::CopyTicket ticket,
                         device_.CopyToHostAsync(grads_dev + r.begin, r.size() * sizeof(float),
                                                 grads.data() + r.begin));
        gradients_copied.push_back({r, ticket});
        return absl::OkStatus();
      };
    }
    return hooks;
  };
  absl::StatusOr<BatchStats> stats =
      Run(step, &hooks_for, params_dev, grads_dev, grads, /*read_sums=*/false);
  // The kernels are issued; each gradient reaches the host in the order backward produced it.
  for (const GradientCopy& copy : gradients_copied) {
    if (!stats.ok()) break;
    absl::Status done = device_.WaitForCopy(copy.ticket);
    if (done.ok() && callbacks.gradient_ready) done = callbacks.gradient_ready(copy.range);
    if (!done.ok()) stats = done;
  }
  // The loss and accuracy sums come back last: reading them waits for every op.
  if (stats.ok()) {
    if (absl::Status read = AddSums(&*stats); !read.ok()) stats = read;
  }
  // Even after an error, no copy may still be reading `params` or writing `grads` once this
  // returns: the caller owns them again.
  const absl::Status quiet = device_.Synchronize();
  if (!stats.ok()) return stats.status();
  RETURN_IF_ERROR(quiet);
  return stats;
}

absl::StatusOr<BatchStats> StepGradient::Run(int64_t step,
                                             const std::function<LayerHooks(int)>* hooks_for,
                                             const float* params_dev, float* grads_dev,
                                             absl::Span<float> grads, bool read_sums) {
  const int64_t n = model_.layout().total();
  const int64_t features = train_.features();
  float* x = x_host_.as<float>();
  int32_t* y = y_host_.as<int32_t>();
  const size_t x_bytes = sizeof(float) * batch_ * features;
  const size_t y_bytes = sizeof(int32_t) * batch_ * train_.shape().labels;
  BatchStats stats;
  // Overlapped: a batch goes in on the copy stream once the ops before it (the previous batch's,
  // which read x_dev_) are done, and the host gathers the next batch as soon as that copy is
  // done, so it issues each batch's kernels while the previous batch computes.
  Device::CopyTicket batch_copied = -1;
  const StepLookups* lookups = fields_ > 0 ? &LookupsOf(step) : nullptr;
  SparseBatch sparse;
  if (lookups != nullptr) {
    RETURN_IF_ERROR(device_.CopyToDevice(sparse_rows_.data(), sparse_rows_.size() * sizeof(float),
                                         rows_dev_.as<float>()));
  }
  for (int micro = 0; micro < accumulate_; ++micro) {
    if (lookups != nullptr) RETURN_IF_ERROR(BindMicroBatch(*lookups, micro, &sparse));
    plan_.MicroBatch(step, micro, &indices_);
    if (batch_copied >= 0) RETURN_IF_ERROR(device_.WaitForCopy(batch_copied));
    train_.Gather(indices_.data(), batch_, x, y);
    if (overlap_copies_) {
      ASSIGN_OR_RETURN(
          const Device::CopyTicket x_copied,
          device_.CopyToDeviceAsync(x, x_bytes, x_dev_.as<float>(), /*after_ops=*/true));
      ASSIGN_OR_RETURN(batch_copied, device_.CopyToDeviceAsync(y, y_bytes, y_dev_.as<int32_t>(),
                                                               /*after_ops=*/true));
      RETURN_IF_ERROR(device_.OpsWaitFor(x_copied));
      RETURN_IF_ERROR(device_.OpsWaitFor(batch_copied));
    } else {
      RETURN_IF_ERROR(device_.CopyToDevice(x, x_bytes, x_dev_.as<float>()));
      RETURN_IF_ERROR(device_.CopyToDevice(y, y_bytes, y_dev_.as<int32_t>()));
    }
    const LayerHooks hooks = hooks_for != nullptr ? (*hooks_for)(micro) : LayerHooks();
    ASSIGN_OR_RETURN(
        BatchStats s,
        model_.ForwardBackward(params_dev, x_dev_.as<float>(), y_dev_.as<int32_t>(), batch_,
                               1.0f / accumulate_, grads_dev, hooks,
                               /*overwrite_grads=*/micro == 0, sums_dev_.as<double>() + 2 * micro));
    stats.count += s.count;
    if (lookups != nullptr) RETURN_IF_ERROR(AddRowGradients(micro));
  }
  if (hooks_for == nullptr && grads_dev != grads.data()) {
    RETURN_IF_ERROR(device_.CopyToHost(grads_dev, n * sizeof(float), grads.data()));
  }
  if (read_sums) RETURN_IF_ERROR(AddSums(&stats));
  return stats;
}

absl::Status StepGradient::AddRowGradients(int micro) {
  const size_t bytes = sparse_row_grads_.size() * sizeof(float);
  if (micro == 0) {
    return device_.CopyToHost(row_grads_dev_.as<float>(), bytes, sparse_row_grads_.data());
  }
  row_grads_micro_.resize(sparse_row_grads_.size());
  RETURN_IF_ERROR(device_.CopyToHost(row_grads_dev_.as<float>(), bytes, row_grads_micro_.data()));
  for (size_t i = 0; i < row_grads_micro_.size(); ++i) sparse_row_grads_[i] += row_grads_micro_[i];
  return absl::OkStatus();
}

absl::Status StepGradient::AddSums(BatchStats* stats) {
  double* sums = sums_host_.as<double>();
  RETURN_IF_ERROR(device_.CopyToHost(sums_dev_.as<double>(), sums_dev_.bytes(), sums));
  // Micro-batch by micro-batch, as they were computed: the same double sums on every path.
  for (int micro = 0; micro < accumulate_; ++micro) {
    stats->loss_sum += sums[2 * micro];
    stats->correct += sums[2 * micro + 1];
  }
  return absl::OkStatus();
}

}  // namespace ps
