#include "common/nn/model.h"

#include "absl/strings/str_cat.h"
#include "common/base/random.h"
#include "common/base/status_macros.h"

namespace ps {

absl::StatusOr<std::unique_ptr<Model>> Model::Create(std::string name,
                                                     std::vector<std::unique_ptr<Layer>> layers,
                                                     Device& device, int max_batch, Loss loss,
                                                     int labels_per_sample) {
  if (layers.empty()) return absl::InvalidArgumentError("a model needs at least one layer");
  if (max_batch <= 0) return absl::InvalidArgumentError("max_batch must be positive");
  if (labels_per_sample < 1 || layers.back()->output_size() % labels_per_sample != 0 ||
      (loss == Loss::kLogistic && labels_per_sample != 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat(labels_per_sample, " labels per sample do not divide the last layer's ",
                     layers.back()->output_size(), " outputs (or the loss takes one)"));
  }
  if (loss == Loss::kLogistic && layers.back()->output_size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the logistic loss takes one logit; the last layer has ", layers.back()->output_size()));
  }
  std::vector<TensorSpec> specs;
  std::vector<SparseTableSpec> tables;
  for (size_t i = 0; i < layers.size(); ++i) {
    for (SparseTableSpec& t : layers[i]->SparseTables()) tables.push_back(std::move(t));
    if (i > 0 && layers[i]->input_size() != layers[i - 1]->output_size()) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", i, " takes ",
                                                     layers[i]->input_size(), " inputs but gets ",
                                                     layers[i - 1]->output_size()));
    }
    for (TensorSpec& s : layers[i]->ParamSpecs()) specs.push_back(std::move(s));
  }
  ASSIGN_OR_RETURN(ParamLayout layout, ParamLayout::Create(std::move(specs)));
  ASSIGN_OR_RETURN(ParamDescription params,
                   ParamDescription::Create(std::move(layout), std::move(tables)));
  std::unique_ptr<Model> model(new Model(std::move(name), std::move(layers), std::move(params),
                                         device, max_batch, loss, labels_per_sample));
  for (size_t i = 0; i < model->layers_.size(); ++i) {
    // Scratch and activations grow with the batch (and a language model's with its context
    // squared): say which layer and batch asked for memory the device does not have.
    const auto in_layer = [&](const absl::Status& s) {
      return absl::Status(s.code(), absl::StrCat("layer ", i, " of the model, for a batch of ",
                                                 max_batch, ": ", s.message()));
    };
    const Layer& layer = *model->layers_[i];
    if (absl::Status s = model->layers_[i]->Prepare(device, max_batch); !s.ok()) {
      return in_layer(s);
    }
    const size_t bytes = sizeof(float) * max_batch * layer.output_size();
    absl::StatusOr<DeviceBuffer> act = device.Allocate(bytes);
    if (!act.ok()) return in_layer(act.status());
    absl::StatusOr<DeviceBuffer> grad = device.Allocate(bytes);
    if (!grad.ok()) return in_layer(grad.status());
    model->activations_.push_back(std::move(*act));
    model->gradients_.push_back(std::move(*grad));
  }
  const int64_t predictions = int64_t{max_batch} * labels_per_sample;
  ASSIGN_OR_RETURN(model->probs_,
                   device.Allocate(sizeof(float) * predictions * model->num_classes()));
  ASSIGN_OR_RETURN(model->loss_rows_, device.Allocate(sizeof(float) * predictions));
  ASSIGN_OR_RETURN(model->correct_rows_, device.Allocate(sizeof(float) * predictions));
  return model;
}

Model::Model(std::string name, std::vector<std::unique_ptr<Layer>> layers, ParamDescription params,
             Device& device, int max_batch, Loss loss, int labels_per_sample)
    : name_(std::move(name)),
      layers_(std::move(layers)),
      params_(std::move(params)),
      device_(device),
      max_batch_(max_batch),
      loss_(loss),
      labels_per_sample_(labels_per_sample) {
  int64_t offset = 0;
  for (const auto& layer : layers_) {
    param_offsets_.push_back(offset);
    for (const TensorSpec& s : layer->ParamSpecs()) offset += s.NumElements();
  }
}

void Model::InitParams(uint64_t seed, float* params) const {
  Rng rng = Rng::FromKeys({seed, 0x1417});
  for (size_t i = 0; i < layers_.size(); ++i)
    layers_[i]->InitParams(rng, params + param_offsets_[i]);
}

void Model::BindSparse(const SparseBatch* batch) {
  for (auto& layer : layers_) layer->BindSparse(batch);
}

KeyRange Model::LayerParams(size_t layer) const {
  const int64_t end =
      layer + 1 < param_offsets_.size() ? param_offsets_[layer + 1] : params_.dense().total();
  return KeyRange{param_offsets_[layer], end};
}

std::vector<KeyRange> Model::LayerParamRanges() const {
  std::vector<KeyRange> ranges;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const KeyRange r = LayerParams(i);
    if (r.size() > 0) ranges.push_back(r);
  }
  return ranges;
}

absl::StatusOr<BatchStats> Model::Forward(const float* params, const float* x,
                                          const int32_t* labels, int batch, const LayerHooks& hooks,
                                          double* sums_on_device) {
  if (batch <= 0 || batch > max_batch_) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch of ", batch, " rows; the model was built for 1..", max_batch_));
  }
  const float* in = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    float* out = activations_[i].as<float>();
    const KeyRange own = LayerParams(i);
    if (hooks.before_forward && own.size() > 0) RETURN_IF_ERROR(hooks.before_forward(own));
    RETURN_IF_ERROR(layers_[i]->Forward(device_, {params + param_offsets_[i], in, batch, out}));
    in = out;
  }
  const int predictions = batch * labels_per_sample_;
  if (loss_ == Loss::kLogistic) {
    RETURN_IF_ERROR(device_.LogisticLoss(batch, in, labels, probs_.as<float>(),
                                         loss_rows_.as<float>(), correct_rows_.as<float>()));
  } else {
    RETURN_IF_ERROR(device_.SoftmaxCrossEntropy(predictions, num_classes(), in, labels,
                                                probs_.as<float>(), loss_rows_.as<float>(),
                                                correct_rows_.as<float>()));
  }
  BatchStats stats;
  stats.count = predictions;
  if (sums_on_device != nullptr) {
    RETURN_IF_ERROR(device_.SumTo(predictions, loss_rows_.as<float>(), sums_on_device));
    RETURN_IF_ERROR(device_.SumTo(predictions, correct_rows_.as<float>(), sums_on_device + 1));
    return stats;
  }
  ASSIGN_OR_RETURN(stats.loss_sum, device_.Sum(predictions, loss_rows_.as<float>()));
  ASSIGN_OR_RETURN(stats.correct, device_.Sum(predictions, correct_rows_.as<float>()));
  return stats;
}

absl::StatusOr<BatchStats> Model::Evaluate(const float* params, const float* x,
                                           const int32_t* labels, int batch) {
  return Forward(params, x, labels, batch, LayerHooks(), nullptr);
}

absl::StatusOr<BatchStats> Model::ForwardBackward(const float* params, const float* x,
                                                  const int32_t* labels, int batch,
                                                  float grad_scale, float* grads,
                                                  const LayerHooks& hooks, bool overwrite_grads,
                                                  double* sums_on_device) {
  ASSIGN_OR_RETURN(BatchStats stats, Forward(params, x, labels, batch, hooks, sums_on_device));
  const size_t last = layers_.size() - 1;
  if (loss_ == Loss::kLogistic) {
    RETURN_IF_ERROR(device_.LogisticLossBackward(batch, probs_.as<float>(), labels,
                                                 grad_scale / batch, gradients_[last].as<float>()));
  } else {
    const int predictions = batch * labels_per_sample_;
    RETURN_IF_ERROR(device_.SoftmaxCrossEntropyBackward(
        predictions, num_classes(), probs_.as<float>(), labels, grad_scale / predictions,
        gradients_[last].as<float>()));
  }
  for (size_t i = last + 1; i-- > 0;) {
    BackwardPass pass;
    pass.params = params + param_offsets_[i];
    pass.x = i == 0 ? x : activations_[i - 1].as<float>();
    pass.y = activations_[i].as<float>();
    pass.dy = gradients_[i].as<float>();
    pass.batch = batch;
    pass.dx = i == 0 ? nullptr : gradients_[i - 1].as<float>();
    pass.grads = grads + param_offsets_[i];
    pass.grads_beta = overwrite_grads ? 0.0f : 1.0f;
    RETURN_IF_ERROR(layers_[i]->Backward(device_, pass));
    const KeyRange own = LayerParams(i);
    if (hooks.after_backward && own.size() > 0) RETURN_IF_ERROR(hooks.after_backward(own));
  }
  return stats;
}

absl::Status AppendClassifierHead(int64_t input_width, const std::vector<int64_t>& hidden,
                                  int64_t classes, std::vector<std::unique_ptr<Layer>>* layers) {
  int64_t width = input_width;
  int index = 1;
  for (int64_t units : hidden) {
    if (units <= 0) return absl::InvalidArgumentError(absl::StrCat("hidden size ", units, " <= 0"));
    layers->push_back(std::make_unique<Linear>(absl::StrCat("fc", index++), width, units));
    layers->push_back(std::make_unique<Relu>(units));
    width = units;
  }
  layers->push_back(std::make_unique<Linear>(absl::StrCat("fc", index), width, classes));
  return absl::OkStatus();
}

}  // namespace ps
