#ifndef PS_COMMON_NN_LAYERS_H_
#define PS_COMMON_NN_LAYERS_H_

// Layers of a sequential network. A layer owns no parameters: it reads them from, and adds its
// gradients to, its own range of the model's flat parameter and gradient buffers (device memory).
// Activations are (batch, features), row-major.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/base/param_layout.h"
#include "common/base/random.h"
#include "common/device/device.h"

namespace ps {

// One micro-batch's view of the model's sparse table (device memory): the unique rows the step
// pulled, which of them each lookup reads, and where their gradient goes.
struct SparseBatch {
  const float* rows = nullptr;  // (unique, dim)
  int64_t unique = 0;
  const int32_t* lookups = nullptr;  // (batch, fields): the row of each lookup, in [0, unique)
  // The lookups grouped by row, for a deterministic sum: row u's are positions[offsets[u] ..
  // offsets[u + 1]), each b * fields + f, increasing.
  const int32_t* offsets = nullptr;    // unique + 1
  const int32_t* positions = nullptr;  // batch * fields
  float* row_grads = nullptr;          // (unique, dim), overwritten by each backward pass
};

// One layer's forward pass over a micro-batch. Every pointer is device memory.
struct ForwardPass {
  const float* params = nullptr;  // the layer's range of the model's flat parameters
  const float* x = nullptr;       // (batch, input_size)
  int batch = 0;
  float* y = nullptr;  // (batch, output_size), written
};

// One layer's backward pass; it follows the Forward of the same batch (layers may keep values of
// that pass in their scratch memory). Every pointer is device memory.
struct BackwardPass {
  const float* params = nullptr;
  const float* x = nullptr;   // the forward pass's input
  const float* y = nullptr;   // and output
  const float* dy = nullptr;  // (batch, output_size)
  int batch = 0;
  // (batch, input_size), written; null when no input gradient is wanted (the first layer).
  float* dx = nullptr;
  // The layer's range of the gradient buffer: grads = grads_beta * grads + this pass's gradients
  // (grads_beta 0: only written, whatever it held).
  float* grads = nullptr;
  float grads_beta = 0.0f;
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual int64_t input_size() const = 0;
  virtual int64_t output_size() const = 0;
  // The layer's tensors, in the order they sit in the flat buffer; empty when it has none.
  virtual std::vector<TensorSpec> ParamSpecs() const = 0;
  // Writes initial values of the layer's parameters into host memory at `params`.
  virtual void InitParams(Rng& rng, float* params) const = 0;
  // Allocates the layer's scratch memory for batches of up to `max_batch` rows. Model::Create
  // calls it once, before any Forward.
  virtual absl::Status Prepare(Device& /*dev*/, int /*max_batch*/) { return absl::OkStatus(); }
  // x (batch, input_size) -> y (batch, output_size).
  virtual absl::Status Forward(Device& dev, const ForwardPass& pass) = 0;
  // Sets grads = grads_beta * grads + the parameter gradients and writes dx unless it is null.
  virtual absl::Status Backward(Device& dev, const BackwardPass& pass) = 0;
  // The sparse tables the layer looks rows up in (none for dense layers), and the micro-batch's
  // rows of them, bound before each pass (null: unbound).
  virtual std::vector<SparseTableSpec> SparseTables() const { return {}; }
  virtual void BindSparse(const SparseBatch* /*batch*/) {}
};

// A layer without dense parameters (its ParamSpecs are empty and it initialises nothing).
class ParameterFreeLayer : public Layer {
 public:
  std::vector<TensorSpec> ParamSpecs() const override { return {}; }
  void InitParams(Rng&, float*) const override {}
};

// y = x W + b with W (in, out) and b (out). Initialised like PyTorch's nn.Linear:
// W and b uniform in [-1/sqrt(in), 1/sqrt(in)). With `positions` > 1 a sample is that many rows
// of `in` (a sequence's tokens), each mapped alike: input positions x in, output positions x out.
// Without `bias` there is no b.
class Linear final : public Layer {
 public:
  Linear(std::string name, int64_t in, int64_t out, int64_t positions = 1, bool bias = true)
      : name_(std::move(name)), in_(in), out_(out), positions_(positions), bias_(bias) {}
  int64_t input_size() const override { return positions_ * in_; }
  int64_t output_size() const override { return positions_ * out_; }
  std::vector<TensorSpec> ParamSpecs() const override;
  void InitParams(Rng& rng, float* params) const override;
  absl::Status Forward(Device& dev, const ForwardPass& pass) override;
  absl::Status Backward(Device& dev, const BackwardPass& pass) override;

 private:
  std::string name_;
  int64_t in_;
  int64_t out_;
  int64_t positions_;
  bool bias_;
};

// y = max(x, 0).
class Relu final : public ParameterFreeLayer {
 public:
  explicit Relu(int64_t size) : size_(size) {}
  int64_t input_size() const override { return size_; }
  int64_t output_size() const override { return size_; }
  absl::Status Forward(Device& dev, const ForwardPass& pass) override;
  absl::Status Backward(Device& dev, const BackwardPass& pass) override;

 private:
  int64_t size_;
};

// A 2-D convolution over NHWC images (height, width, in_channels) with a square `kernel`,
// stride 1 and no padding, computed as im2col + GEMM on every device:
// y (batch, height-kernel+1, width-kernel+1, out_channels). W is (kernel, kernel, in_channels,
// out_channels), b (out_channels); initialised like PyTorch's nn.Conv2d: uniform in
// [-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = kernel * kernel * in_channels.
class Conv2d final : public Layer {
 public:
  Conv2d(std::string name, int height, int width, int in_channels, int out_channels, int kernel);
  int64_t input_size() const override { return int64_t{height_} * width_ * in_; }
  int64_t output_size() const override { return int64_t{out_h_} * out_w_ * out_; }
  std::vector<TensorSpec> ParamSpecs() const override;
  void InitParams(Rng& rng, float* params) const override;
  absl::Status Prepare(Device& dev, int max_batch) override;
  absl::Status Forward(Device& dev, const ForwardPass& pass) override;
  absl::Status Backward(Device& dev, const BackwardPass& pass) override;

 private:
  std::string name_;
  int height_, width_, in_, out_, kernel_, out_h_, out_w_;
  int64_t patch_;      // kernel * kernel * in_channels
  DeviceBuffer cols_;  // the forward pass's im2col rows, reused for their gradient in backward
};

// Max pooling over NHWC images with a pool x pool window and stride pool.
class MaxPool2d final : public ParameterFreeLayer {
 public:
  MaxPool2d(int height, int width, int channels, int pool)
      : height_(height), width_(width), channels_(channels), pool_(pool) {}
  int64_t input_size() const override { return int64_t{height_} * width_ * channels_; }
  int64_t output_size() const override {
    return int64_t{height_ / pool_} * (width_ / pool_) * channels_;
  }
  absl::Status Prepare(Device& dev, int max_batch) override;
  absl::Status Forward(Device& dev, const ForwardPass& pass) override;
  absl::Status Backward(Device& dev, const BackwardPass& pass) override;

 private:
  int height_, width_, channels_, pool_;
  DeviceBuffer argmax_;  // (max_batch, output_size) indices into the batch's input
};

// Sparse lookups: x (batch, width) -> y (batch, width + fields * dim) = [x | the rows of `table`
// that the row's `fields` lookups name]. The rows are the micro-batch's (SparseBatch), not in the
// dense buffer: Backward writes their gradient to SparseBatch::row_grads. A pass without a bound
// SparseBatch fails with FAILED_PRECONDITION.
class EmbeddingConcat final : public ParameterFreeLayer {
 public:
  EmbeddingConcat(SparseTableSpec table, int64_t width, int fields)
      : table_(std::move(table)), width_(width), fields_(fields) {}
  int64_t input_size() const override { return width_; }
  int64_t output_size() const override { return width_ + fields_ * table_.dim; }
  absl::Status Forward(Device& dev, const ForwardPass& pass) override;
  absl::Status Backward(Device& dev, const BackwardPass& pass) override;
  std::vector<SparseTableSpec> SparseTables() const override { return {table_}; }
  void BindSparse(const SparseBatch* batch) override { batch_ = batch; }

 private:
  // FAILED_PRECONDITION when no SparseBatch is bound.
  absl::Status CheckBound() const;

  SparseTableSpec table_;
  int64_t width_;
  int fields_;
  const SparseBatch* batch_ = nullptr;
};

// DLRM's feature interaction: x (batch, n * dim), n vectors per row -> y (batch, dim +
// n * (n - 1) / 2): the first vector (the dense features' embedding), then every pairwise dot
// product <x_i, x_j>, i > j.
class DotInteraction final : public ParameterFreeLayer {
 public:
  DotInteraction(int vectors, int dim) : n_(vectors), dim_(dim) {}
  int64_t input_size() const override { return int64_t{n_} * dim_; }
  int64_t output_size() const override { return dim_ + int64_t{n_} * (n_ - 1) / 2; }
  absl::Status Forward(Device& dev, const ForwardPass& pass) override;
  absl::Status Backward(Device& dev, const BackwardPass& pass) override;

 private:
  int n_;
  int dim_;
};

}  // namespace ps

#endif  // PS_COMMON_NN_LAYERS_H_
