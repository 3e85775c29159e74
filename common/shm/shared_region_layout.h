#ifndef PS_COMMON_SHM_SHARED_REGION_LAYOUT_H_
#define PS_COMMON_SHM_SHARED_REGION_LAYOUT_H_

// The layout of a worker's shared-memory region (common/shm/shared_memory.h), as both sides address
// it: `slots` pairs of areas, each pair a gradient area then a weights area of `total_params`
// float32 elements, all back to back. Slot s holds one step's payloads; a worker that computes
// one step while another travels uses two. The worker owns the region; a shard on the same host
// reads pushed gradients from, and writes pulled weights into, the areas a request names.

#include <cstdint>

namespace ps {

enum class RegionArea { kGradient = 0, kWeights = 1 };

struct SharedRegionLayout {
  static constexpr int kMaxSlots = 16;

  int64_t total_params = 0;
  int slots = 1;  // 1..kMaxSlots

  // The region's size in bytes.
  int64_t bytes() const { return 2 * int64_t{slots} * total_params * int64_t{sizeof(float)}; }
  // Byte offset of element `begin` of `area` in slot `slot`.
  int64_t Offset(int slot, RegionArea area, int64_t begin) const {
    return int64_t{sizeof(float)} *
           ((2 * int64_t{slot} + static_cast<int64_t>(area)) * total_params + begin);
  }
  // Whether slot `slot` exists and elements [begin, end) lie inside an area.
  bool Holds(int slot, int64_t begin, int64_t end) const {
    return slot >= 0 && slot < slots && begin >= 0 && begin <= end && end <= total_params;
  }
};

}  // namespace ps

#endif  // PS_COMMON_SHM_SHARED_REGION_LAYOUT_H_
