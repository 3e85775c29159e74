#include "worker/shared_region.h"

#include <algorithm>

#include "common/base/status_macros.h"

namespace ps {

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Create(const SharedRegionLayout& layout,
                                                                   int num_shards) {
  ASSIGN_OR_RETURN(std::unique_ptr<SharedMemory> memory,
                   SharedMemory::Create(static_cast<size_t>(std::max<int64_t>(layout.bytes(), 1))));
  return std::unique_ptr<SharedRegion>(new SharedRegion(std::move(memory), layout, num_shards));
}

SharedRegion::SharedRegion(std::unique_ptr<SharedMemory> memory, const SharedRegionLayout& layout,
                           int num_shards)
    : memory_(std::move(memory)),
      layout_(layout),
      attached_(num_shards, 0),
      lent_(2 * layout.slots),
      taken_(2 * layout.slots, 0) {}

void SharedRegion::SetAttached(std::vector<char> attached) {
  absl::MutexLock lock(&mu_);
  attached_ = std::move(attached);
}

int SharedRegion::attached_shards() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(std::count(attached_.begin(), attached_.end(), 1));
}

TransportBuffers SharedRegion::Take(int set, bool weights, bool gradient) {
  TransportBuffers buffers;
  if (set < 0 || set >= layout_.slots) return buffers;
  absl::MutexLock lock(&mu_);
  const size_t n = static_cast<size_t>(layout_.total_params);
  if (weights) {
    taken_[Index(RegionArea::kWeights, set)] = 1;
    buffers.weights = {reinterpret_cast<float*>(At(RegionArea::kWeights, set, 0)), n};
  }
  if (gradient) {
    taken_[Index(RegionArea::kGradient, set)] = 1;
    buffers.gradient = {reinterpret_cast<float*>(At(RegionArea::kGradient, set, 0)), n};
  }
  return buffers;
}

int SharedRegion::DirectSlot(RegionArea area, const float* data) const {
  absl::MutexLock lock(&mu_);
  for (int slot = 0; slot < layout_.slots; ++slot) {
    if (taken_[Index(area, slot)] && data == reinterpret_cast<const float*>(At(area, slot, 0))) {
      return slot;
    }
  }
  return -1;
}

int SharedRegion::Lend(RegionArea area, int shard, KeyRange range, int direct_slot) {
  absl::MutexLock lock(&mu_);
  if (static_cast<size_t>(shard) >= attached_.size() || !attached_[shard] || range.size() <= 0) {
    return -1;
  }
  for (int slot = 0; slot < layout_.slots; ++slot) {
    const int at = Index(area, slot);
    // The caller's own area, or else a bounce buffer: an area nobody took.
    if (direct_slot >= 0 ? slot != direct_slot : taken_[at] != 0) continue;
    std::vector<KeyRange>& lent = lent_[at];
    const bool free = std::none_of(lent.begin(), lent.end(), [&](const KeyRange& r) {
      return r.begin < range.end && range.begin < r.end;
    });
    if (!free) continue;
    lent.push_back(range);
    return slot;
  }
  return -1;
}

void SharedRegion::GiveBack(RegionArea area, int slot, KeyRange range) {
  absl::MutexLock lock(&mu_);
  std::vector<KeyRange>& lent = lent_[Index(area, slot)];
  auto it = std::find(lent.begin(), lent.end(), range);
  if (it != lent.end()) lent.erase(it);
}

int SharedRegion::Leases::Lend(size_t i, int shard, KeyRange range, int direct_slot) {
  if (region_ == nullptr) return -1;
  slots_[i] = region_->Lend(area_, shard, range, direct_slot);
  ranges_[i] = range;
  return slots_[i];
}

SharedRegion::Leases::~Leases() {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i] >= 0) region_->GiveBack(area_, slots_[i], ranges_[i]);
  }
}

}  // namespace ps
