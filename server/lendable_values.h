#ifndef PS_SERVER_LENDABLE_VALUES_H_
#define PS_SERVER_LENDABLE_VALUES_H_

// The shard's weights, lendable without a copy to readers that finish after the shard's lock is
// released: a pull's reply is sent by gRPC from the weights themselves, while later pushes go on.
// The contract is copy on write: a buffer that is lent is never written again. The next write
// first moves the values to a buffer no loan holds (the spare when its loans have ended, else a
// fresh one); while nothing is lent, writes go in place. So a pull costs no copy, and a push
// costs one only when it overlaps a reply still being sent, which BSP's rounds never do and ASP
// does at most once per push, however many pulls it overlaps. Memory: once a write has had to
// copy, the spare stays allocated, so such a shard holds its weights twice (the snapshot copies
// this replaces held one copy per reply in flight).
//
// Not thread-safe: the owner serialises every call (the shard's lock). Loans may be dropped on
// any thread at any time.

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/types/span.h"

namespace ps {

class LendableValues {
 public:
  using Loan = std::shared_ptr<const std::vector<float>>;

  LendableValues() : current_(std::make_shared<std::vector<float>>()) {}

  size_t size() const { return current_->size(); }
  // The values now; valid until the next Mutable() or Assign().
  const std::vector<float>& values() const { return *current_; }
  absl::Span<const float> view() const { return *current_; }

  void Assign(std::vector<float> values) {
    if (Lent(current_)) current_ = std::make_shared<std::vector<float>>();
    *current_ = std::move(values);
  }

  // Write access to the values; never to a lent buffer.
  absl::Span<float> Mutable() {
    if (Lent(current_)) {
      if (spare_ == nullptr || Lent(spare_)) spare_ = std::make_shared<std::vector<float>>();
      spare_->assign(current_->begin(), current_->end());
      std::swap(current_, spare_);
      ++copies_on_write_;
    }
    return absl::MakeSpan(*current_);
  }

  // The current buffer, unchanged and alive while the loan is held.
  Loan Lend() const { return current_; }

  // How many writes had to copy because the buffer was lent.
  int64_t copies_on_write() const { return copies_on_write_; }

 private:
  // Only the owner (under its lock) takes loans, so a count of 1 seen here stays 1 until the
  // owner lends again. The acquire fence orders the borrowers' last reads (before their release
  // decrement) before the owner's next writes.
  static bool Lent(const std::shared_ptr<std::vector<float>>& buffer) {
    if (buffer.use_count() > 1) return true;
    std::atomic_thread_fence(std::memory_order_acquire);
    return false;
  }

  std::shared_ptr<std::vector<float>> current_;
  std::shared_ptr<std::vector<float>> spare_;  // the buffer before the last copy on write
  int64_t copies_on_write_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_LENDABLE_VALUES_H_
