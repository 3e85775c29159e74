#ifndef PS_COMMON_NN_MODEL_H_
#define PS_COMMON_NN_MODEL_H_

// A sequential classifier: layers, then its loss (softmax cross-entropy over classes, or the
// logistic loss of one logit for a binary label). The model owns its activation buffers (device
// memory, sized for `max_batch` rows) but not its parameters or gradients, which live in the
// caller's flat buffers laid out by layout(); the rows of its sparse tables, if any, are the
// caller's too, bound per micro-batch (BindSparse).

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/param_layout.h"
#include "common/device/device.h"
#include "common/nn/layers.h"

namespace ps {

// Sums over the rows of one batch.
struct BatchStats {
  // Over the batch's predictions: one per sample, or one per position of a language model's
  // window (its tokens).
  double loss_sum = 0.0;  // sum of the predictions' cross-entropy (nats)
  double correct = 0.0;   // predictions whose arg-max equals the label
  int64_t count = 0;      // predictions
  // Evaluations of a logistic model over a data set: the area under the ROC curve of its
  // probabilities (loss_sum / count is then the log-loss); -1 when not computed.
  double auc = -1;
  // A training step with gradient clipping: the L2 norm of its whole gradient before clipping;
  // -1 when not computed.
  double grad_norm = -1;
};

// Called around the layers that have parameters, with the layer's key range in the layout: for
// priority scheduling, the trainer waits in before_forward until that layer's weights have
// arrived, and sends a layer's gradient from after_backward, while backward goes on with the
// layers below. An error stops the pass and is returned. Either may be empty.
struct LayerHooks {
  std::function<absl::Status(KeyRange params)> before_forward;
  std::function<absl::Status(KeyRange params)> after_backward;
};

enum class Loss {
  kSoftmaxCrossEntropy,  // labels in [0, classes), one logit per class
  kLogistic,             // labels 0 or 1, one logit: p(1) = sigmoid(logit)
};

class Model {
 public:
  // Takes ownership of the layers; their sizes must chain, and a logistic loss needs one output
  // (INVALID_ARGUMENT otherwise). The layers' sparse tables join the parameter description.
  // A sample has `labels_per_sample` labels (a language model: one per position), and the last
  // layer's output is that many rows of logits, each a prediction of its own.
  static absl::StatusOr<std::unique_ptr<Model>> Create(std::string name,
                                                       std::vector<std::unique_ptr<Layer>> layers,
                                                       Device& device, int max_batch,
                                                       Loss loss = Loss::kSoftmaxCrossEntropy,
                                                       int labels_per_sample = 1);

  const std::string& name() const { return name_; }
  // The dense parameters' layout, and the whole description (dense layout and sparse tables).
  const ParamLayout& layout() const { return params_.dense(); }
  const ParamDescription& description() const { return params_; }
  int64_t input_size() const { return layers_.front()->input_size(); }
  // Logits per prediction: the classes, or 1 under the logistic loss.
  int64_t num_classes() const { return layers_.back()->output_size() / labels_per_sample_; }
  int labels_per_sample() const { return labels_per_sample_; }
  Loss loss() const { return loss_; }
  // The micro-batch's rows of the sparse tables, read by the next passes (it must outlive them);
  // null unbinds. A model with sparse tables fails a pass without one (FAILED_PRECONDITION).
  void BindSparse(const SparseBatch* batch);
  // After a pass over `batch` rows: the probabilities it computed, device memory:
  // (batch, num_classes()) for softmax, (batch) of p(label 1) for the logistic loss.
  const float* probabilities() const { return probs_.as<float>(); }
  // After a pass: the last layer's output (the logits), (batch, output size), device memory.
  const float* logits() const { return activations_.back().as<float>(); }
  int max_batch() const { return max_batch_; }
  // The parameters of each layer that has any, in forward order; they tile the layout.
  std::vector<KeyRange> LayerParamRanges() const;

  // Fills host memory `params` (layout().total() floats) with the initial weights of `seed`.
  void InitParams(uint64_t seed, float* params) const;

  // Forward and backward over `batch` <= max_batch() samples x (batch, input_size) and labels
  // (batch, labels_per_sample()), all device memory. Adds grad_scale * d(mean loss over the
  // batch's predictions)/d(params) to
  // `grads`; a caller accumulating K micro-batches passes 1/K. With `overwrite_grads`, `grads`
  // is set to that instead, whatever it held (the first micro-batch needs no zeroed buffer).
  // With `sums_on_device` (device memory, 2 doubles), the batch's loss and correct sums are
  // written there and not waited for, so the host can issue the next batch at once; the
  // returned stats then carry only the count.
  absl::StatusOr<BatchStats> ForwardBackward(const float* params, const float* x,
                                             const int32_t* labels, int batch, float grad_scale,
                                             float* grads, const LayerHooks& hooks = {},
                                             bool overwrite_grads = false,
                                             double* sums_on_device = nullptr);
  // Forward only: the loss and accuracy sums of the batch.
  absl::StatusOr<BatchStats> Evaluate(const float* params, const float* x, const int32_t* labels,
                                      int batch);

 private:
  Model(std::string name, std::vector<std::unique_ptr<Layer>> layers, ParamDescription params,
        Device& device, int max_batch, Loss loss, int labels_per_sample);
  absl::StatusOr<BatchStats> Forward(const float* params, const float* x, const int32_t* labels,
                                     int batch, const LayerHooks& hooks, double* sums_on_device);
  KeyRange LayerParams(size_t layer) const;  // may be empty

  std::string name_;
  std::vector<std::unique_ptr<Layer>> layers_;
  ParamDescription params_;
  std::vector<int64_t> param_offsets_;  // offset of each layer's first parameter
  Device& device_;
  int max_batch_;
  Loss loss_;
  int labels_per_sample_;
  std::vector<DeviceBuffer> activations_;  // output of layer i, (max_batch, output_size)
  std::vector<DeviceBuffer> gradients_;    // d loss / d output of layer i
  DeviceBuffer probs_;
  DeviceBuffer loss_rows_;
  DeviceBuffer correct_rows_;
};

// Appends the classifier every model ends with: [Linear -> ReLU] per hidden width, then
// Linear -> classes, named fc1, fc2, ... INVALID_ARGUMENT for a width <= 0.
absl::Status AppendClassifierHead(int64_t input_width, const std::vector<int64_t>& hidden,
                                  int64_t classes, std::vector<std::unique_ptr<Layer>>* layers);

}  // namespace ps

#endif  // PS_COMMON_NN_MODEL_H_
