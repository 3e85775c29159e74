#ifndef PS_WORKER_STEP_BUFFERS_H_
#define PS_WORKER_STEP_BUFFERS_H_

// The host buffers a step schedule computes in: the weights it pulls and the gradient it pushes,
// and for the double-buffered schedules a second of either.
//
// They live in the transport's own buffers when it has them (shared memory with the shards):
// pulls land and pushes leave with no copy on this side, and a host-addressable (CPU) device
// computes in them directly. A GPU device pins them, so its copies to and from them are DMA
// transfers. Otherwise they live in the device's preferred host memory (pinned for CUDA).

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/device/device.h"
#include "worker/parameter_client.h"

namespace ps {

class StepBuffers {
 public:
  // Buffers of `n` floats each; `second_weights` / `second_gradient` ask for a second of each.
  // Takes the client's transport buffers where they fit (all of a kind, or none), and allocates
  // the rest on `device` (which must outlive the buffers). `rank` names the worker in warnings.
  static absl::StatusOr<StepBuffers> Create(ParameterClient& client, Device& device, int64_t n,
                                            bool second_weights, bool second_gradient, int rank);

  absl::Span<float> weights() const { return weights_; }
  absl::Span<float> gradient() const { return gradient_; }
  absl::Span<float> second_weights() const { return second_weights_; }    // empty unless asked
  absl::Span<float> second_gradient() const { return second_gradient_; }  // empty unless asked

 private:
  absl::Span<float> weights_, gradient_, second_weights_, second_gradient_;
  // Registration of the taken transport buffers with a device that is not host-addressable;
  // released before the client unmaps its region, since the buffers die before the client.
  DeviceBuffer pinned_;
  // Those the transport did not provide.
  DeviceBuffer own_weights_, own_gradient_, own_second_weights_, own_second_gradient_;
};

}  // namespace ps

#endif  // PS_WORKER_STEP_BUFFERS_H_
