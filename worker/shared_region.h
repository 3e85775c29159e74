#ifndef PS_WORKER_SHARED_REGION_H_
#define PS_WORKER_SHARED_REGION_H_

// The worker's side of its shared-memory region (common/shm/shared_memory.h, laid out as
// SharedRegionLayout): which areas the caller took as its own buffers (TakeTransportBuffers),
// which shards attached the region, and which parts of which areas are lent to calls in flight.
// Each part of an area is lent to one call at a time. Thread-safe.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/base/param_layout.h"
#include "common/shm/shared_memory.h"
#include "common/shm/shared_region_layout.h"
#include "worker/parameter_client.h"

namespace ps {

class SharedRegion {
 public:
  // A new region of `layout` for `num_shards` shards, none attached yet.
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Create(const SharedRegionLayout& layout,
                                                              int num_shards);

  const SharedMemory& memory() const { return *memory_; }
  const SharedRegionLayout& layout() const { return layout_; }
  // Element `begin` of slot `slot`'s `area`.
  char* At(RegionArea area, int slot, int64_t begin) const {
    return memory_->data() + layout_.Offset(slot, area, begin);
  }

  // Which shards opened the region; only calls to those use it.
  void SetAttached(std::vector<char> attached);
  int attached_shards() const;

  // Slot `set`'s weights area (when `weights`) and gradient area (when `gradient`), handed to the
  // caller: their data is the caller's from now on, so they are no bounce buffers any more.
  TransportBuffers Take(int set, bool weights, bool gradient);
  // The slot whose `area` the caller took and `data` starts; -1: none.
  int DirectSlot(RegionArea area, const float* data) const;

  // The parts of one area that one call's pieces borrow, given back when destroyed (after the
  // calls have finished with them).
  class Leases {
   public:
    Leases(SharedRegion* region, RegionArea area, size_t pieces)
        : region_(region), area_(area), slots_(pieces, -1), ranges_(pieces) {}
    ~Leases();
    Leases(const Leases&) = delete;
    Leases& operator=(const Leases&) = delete;
    // Lends `range` of an area for piece `i`'s call to `shard` and returns the slot: `direct_slot`
    // when the call's buffer is that slot's area (which the caller took), else any slot whose
    // area the caller did not take (a bounce buffer). -1 when the region is not attached to that
    // shard, there is no region, or no such slot has the range free.
    int Lend(size_t i, int shard, KeyRange range, int direct_slot);
    int slot(size_t i) const { return slots_[i]; }

   private:
    SharedRegion* region_;  // may be null: nothing is lent
    RegionArea area_;
    std::vector<int> slots_;
    std::vector<KeyRange> ranges_;
  };

 private:
  SharedRegion(std::unique_ptr<SharedMemory> memory, const SharedRegionLayout& layout,
               int num_shards);
  int Lend(RegionArea area, int shard, KeyRange range, int direct_slot);
  void GiveBack(RegionArea area, int slot, KeyRange range);
  static int Index(RegionArea area, int slot) { return 2 * slot + static_cast<int>(area); }

  const std::unique_ptr<SharedMemory> memory_;
  const SharedRegionLayout layout_;
  mutable absl::Mutex mu_;
  std::vector<char> attached_ ABSL_GUARDED_BY(mu_);  // per shard
  // At Index(area, slot): the parts lent to calls, and whether the caller took the area.
  std::vector<std::vector<KeyRange>> lent_ ABSL_GUARDED_BY(mu_);
  std::vector<char> taken_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_WORKER_SHARED_REGION_H_
