#ifndef PS_TESTS_COMMON_DEVICE_DEFERRED_COPY_DEVICE_H_
#define PS_TESTS_COMMON_DEVICE_DEFERRED_COPY_DEVICE_H_

// A device with the CUDA device's memory model, for tests on machines without a GPU: device
// memory is apart from host memory (not host-addressable), and the async copies are as late as
// Device's contract allows.
// - A copy lands (its destination changes) only when a caller must see its data: at
//   OpsWaitFor(ticket), WaitForCopy(ticket) (each with every copy issued before it, in order,
//   like a copy stream) or Synchronize(). Code that reads device memory without OpsWaitFor, or a
//   copied gradient on the host without WaitForCopy, computes with other bits than CpuDevice and
//   fails a comparison against it.
// - Its source is read when it is issued (the ops before it are done: they run at once) and
//   must stay unchanged until it is released, at WaitForCopy(ticket) or Synchronize() (not at
//   OpsWaitFor, which does not wait on the host). A source that changed before its release (host
//   memory rewritten while being copied in, or device memory written by an op while being copied
//   out) fails the releasing call with FAILED_PRECONDITION.
// The ops are CpuDevice's, so results are otherwise the same to the bit.

#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/device/cpu_device.h"

namespace ps {

class DeferredCopyDevice final : public Device {
 public:
  std::string name() const override { return "deferred-copy"; }
  bool host_addressable() const override { return false; }
  bool overlaps_copies() const override { return true; }

  // What the code under test asked of the device.
  struct Counts {
    int async_to_device = 0;
    int async_to_host = 0;
    int sync_to_device = 0;
    int sync_to_host = 0;
    int registered = 0;           // RegisterHostMemory calls
    size_t registered_bytes = 0;  // the last one's size
    int pinned_now = 0;           // registrations whose handle is still alive
  };
  const Counts& counts() const { return counts_; }
  // Async copies issued and not yet released.
  size_t pending() const { return unreleased_.size(); }

  // Device memory beyond `bytes` per allocation is RESOURCE_EXHAUSTED (a smaller device).
  void set_allocation_limit(size_t bytes) { allocation_limit_ = bytes; }
  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override {
    if (bytes > allocation_limit_) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes"));
    }
    return cpu_.Allocate(bytes);
  }
  absl::StatusOr<DeviceBuffer> AllocateHost(size_t bytes) override {
    return cpu_.AllocateHost(bytes);
  }
  absl::Status CopyToDevice(const void* host, size_t bytes, void* device) override {
    ++counts_.sync_to_device;
    return cpu_.CopyToDevice(host, bytes, device);
  }
  absl::Status CopyToHost(const void* device, size_t bytes, void* host) override {
    ++counts_.sync_to_host;
    return cpu_.CopyToHost(device, bytes, host);
  }
  // The ops run at once, so a copy issued `after_ops` is after them already.
  absl::StatusOr<CopyTicket> CopyToDeviceAsync(const void* host, size_t bytes, void* device,
                                               bool /*after_ops*/) override {
    ++counts_.async_to_device;
    return Defer(host, bytes, device);
  }
  absl::StatusOr<CopyTicket> CopyToHostAsync(const void* device, size_t bytes,
                                             void* host) override {
    ++counts_.async_to_host;
    return Defer(device, bytes, host);
  }
  absl::Status OpsWaitFor(CopyTicket ticket) override {
    RETURN_IF_ERROR(CheckTicket(ticket));
    Land(ticket);
    return absl::OkStatus();
  }
  absl::Status WaitForCopy(CopyTicket ticket) override {
    RETURN_IF_ERROR(CheckTicket(ticket));
    return Release(ticket);
  }
  absl::Status Synchronize() override {
    absl::Status released = Release(issued_ - 1);
    issued_ = 0;
    return released;
  }
  absl::StatusOr<DeviceBuffer> RegisterHostMemory(void* host, size_t bytes) override {
    ++counts_.registered;
    counts_.registered_bytes = bytes;
    ++counts_.pinned_now;
    return DeviceBuffer(host, bytes, [this](void*) { --counts_.pinned_now; });
  }

  absl::Status Fill(float value, int64_t n, float* x) override { return cpu_.Fill(value, n, x); }
#define PS_DEVICE_OP(ReturnType, Name, Params, Args) \
  ReturnType Name Params override { return cpu_.Name Args; }
#include "common/device/device_ops.def"
#undef PS_DEVICE_OP
  absl::Status SumTo(int64_t n, const float* x, double* out) override {
    return cpu_.SumTo(n, x, out);
  }

 private:
  struct Copy {
    CopyTicket ticket;
    const void* from;
    size_t bytes;
    void* to;
    std::vector<char> read_at_issue;
    bool landed = false;
  };

  CopyTicket Defer(const void* from, size_t bytes, void* to) {
    const char* bytes_from = static_cast<const char*>(from);
    unreleased_.push_back(
        {issued_, from, bytes, to, std::vector<char>(bytes_from, bytes_from + bytes)});
    return issued_++;
  }
  // INVALID_ARGUMENT for a ticket not issued since the last Synchronize(), as the CUDA device.
  absl::Status CheckTicket(CopyTicket ticket) const {
    if (ticket < 0 || ticket >= issued_) {
      return absl::InvalidArgumentError(absl::StrCat("copy ticket ", ticket, " is not in flight"));
    }
    return absl::OkStatus();
  }
  // Lands the copies up to and including `ticket` that have not landed, oldest first.
  void Land(CopyTicket ticket) {
    for (Copy& c : unreleased_) {
      if (c.ticket > ticket) break;
      if (!c.landed && c.bytes > 0) std::memcpy(c.to, c.read_at_issue.data(), c.bytes);
      c.landed = true;
    }
  }
  // Lands and releases the copies up to and including `ticket`, checking their sources.
  absl::Status Release(CopyTicket ticket) {
    Land(ticket);
    absl::Status status;
    while (!unreleased_.empty() && unreleased_.front().ticket <= ticket) {
      const Copy& c = unreleased_.front();
      if (c.bytes > 0 && std::memcmp(c.from, c.read_at_issue.data(), c.bytes) != 0 && status.ok()) {
        status = absl::FailedPreconditionError(
            absl::StrCat("the source of async copy ", c.ticket, " (", c.bytes,
                         " bytes) changed before the copy was waited for"));
      }
      unreleased_.pop_front();
    }
    return status;
  }

  CpuDevice cpu_;
  size_t allocation_limit_ = SIZE_MAX;
  std::deque<Copy> unreleased_;  // ticket order
  int issued_ = 0;               // tickets since the last Synchronize()
  Counts counts_;
};

}  // namespace ps

#endif  // PS_TESTS_COMMON_DEVICE_DEFERRED_COPY_DEVICE_H_
