#include "worker/step_buffers.h"

#include "common/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace ps {

namespace {

// Pins the one stretch of the transport's region that holds every taken span: one registration
// (pinning ranges that share a page twice would fail). A failure only costs speed.
DeviceBuffer PinTaken(Device& device, std::initializer_list<absl::Span<float>> taken, int rank) {
  const float* first = nullptr;
  const float* last = nullptr;
  for (absl::Span<float> span : taken) {
    if (span.empty()) continue;
    if (first == nullptr || span.data() < first) first = span.data();
    if (last == nullptr || span.data() + span.size() > last) last = span.data() + span.size();
  }
  if (first == nullptr) return DeviceBuffer();
  absl::StatusOr<DeviceBuffer> pin = device.RegisterHostMemory(
      const_cast<float*>(first), static_cast<size_t>(last - first) * sizeof(float));
  if (pin.ok()) return *std::move(pin);
  spdlog::warn("rank {}: shared buffers stay unpinned, so copies to the device are slower: {}",
               rank, pin.status().ToString());
  return DeviceBuffer();
}

// Gives `span` host memory of `n` floats from `device` unless it has a buffer already.
absl::Status Own(Device& device, int64_t n, DeviceBuffer& host, absl::Span<float>& span) {
  if (!span.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(host, device.AllocateHost(n * sizeof(float)));
  span = absl::Span<float>(host.as<float>(), n);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StepBuffers> StepBuffers::Create(ParameterClient& client, Device& device, int64_t n,
                                                bool second_weights, bool second_gradient,
                                                int rank) {
  StepBuffers b;
  const size_t size = static_cast<size_t>(n);
  const bool double_buffered = second_weights || second_gradient;
  // A double-buffered schedule takes the transport's second set too, or neither (a taken area is
  // no bounce buffer for a buffer of our own).
  const TransportBuffers second =
      double_buffered ? client.TakeTransportBuffers(1) : TransportBuffers{};
  if (!double_buffered || !second.weights.empty() || !second.gradient.empty()) {
    const TransportBuffers first = client.TakeTransportBuffers(0);
    if (first.weights.size() == size && (!double_buffered || second.weights.size() == size)) {
      b.weights_ = first.weights;
      if (second_weights) b.second_weights_ = second.weights;
    }
    if (first.gradient.size() == size && (!double_buffered || second.gradient.size() == size)) {
      b.gradient_ = first.gradient;
      if (second_gradient) b.second_gradient_ = second.gradient;
    }
  }
  if (!device.host_addressable()) {
    b.pinned_ =
        PinTaken(device, {b.weights_, b.gradient_, b.second_weights_, b.second_gradient_}, rank);
  }
  RETURN_IF_ERROR(Own(device, n, b.own_weights_, b.weights_));
  RETURN_IF_ERROR(Own(device, n, b.own_gradient_, b.gradient_));
  if (second_weights) RETURN_IF_ERROR(Own(device, n, b.own_second_weights_, b.second_weights_));
  if (second_gradient) {
    RETURN_IF_ERROR(Own(device, n, b.own_second_gradient_, b.second_gradient_));
  }
  return b;
}

}  // namespace ps
