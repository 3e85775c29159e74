#ifndef PS_COMMON_LAYERS_H_
#define PS_COMMON_LAYERS_H_

// Layers of a sequential network. A layer owns no parameters: it reads them from, and adds its
// gradients to, its own range of the model's flat parameter and gradient buffers (device memory).
// Activations are (batch, features), row-major.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/device.h"
#include "common/param_layout.h"
#include "common/random.h"

namespace ps {

class Layer {
 public:
  virtual ~Layer() = default;
  virtual int64_t input_size() const = 0;
  virtual int64_t output_size() const = 0;
  // The layer's tensors, in the order they sit in the flat buffer; empty when it has none.
  virtual std::vector<TensorSpec> ParamSpecs() const = 0;
  // Writes initial values of the layer's parameters into host memory at `params`.
  virtual void InitParams(Rng& rng, float* params) const = 0;
  // x (batch, input_size) -> y (batch, output_size).
  virtual absl::Status Forward(Device& dev, const float* params, const float* x, int batch,
                               float* y) = 0;
  // Given x, y of the forward pass and dy, adds the parameter gradients to `grads` and writes dx
  // (batch, input_size) unless dx is null (the first layer needs no input gradient).
  virtual absl::Status Backward(Device& dev, const float* params, const float* x, const float* y,
                                const float* dy, int batch, float* dx, float* grads) = 0;
};

// y = x W + b with W (in, out) and b (out). Initialised like PyTorch's nn.Linear:
// W and b uniform in [-1/sqrt(in), 1/sqrt(in)).
class Linear final : public Layer {
 public:
  Linear(std::string name, int64_t in, int64_t out) : name_(std::move(name)), in_(in), out_(out) {}
  int64_t input_size() const override { return in_; }
  int64_t output_size() const override { return out_; }
  std::vector<TensorSpec> ParamSpecs() const override;
  void InitParams(Rng& rng, float* params) const override;
  absl::Status Forward(Device& dev, const float* params, const float* x, int batch,
                       float* y) override;
  absl::Status Backward(Device& dev, const float* params, const float* x, const float* y,
                        const float* dy, int batch, float* dx, float* grads) override;

 private:
  std::string name_;
  int64_t in_;
  int64_t out_;
};

// y = max(x, 0).
class Relu final : public Layer {
 public:
  explicit Relu(int64_t size) : size_(size) {}
  int64_t input_size() const override { return size_; }
  int64_t output_size() const override { return size_; }
  std::vector<TensorSpec> ParamSpecs() const override { return {}; }
  void InitParams(Rng&, float*) const override {}
  absl::Status Forward(Device& dev, const float* params, const float* x, int batch,
                       float* y) override;
  absl::Status Backward(Device& dev, const float* params, const float* x, const float* y,
                        const float* dy, int batch, float* dx, float* grads) override;

 private:
  int64_t size_;
};

}  // namespace ps

#endif  // PS_COMMON_LAYERS_H_
