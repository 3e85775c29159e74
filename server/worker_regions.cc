#include "server/worker_regions.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace ps {

absl::Status WorkerRegions::Attach(int rank, uint64_t incarnation, int64_t pid, int64_t fd,
                                   uint64_t nonce, const SharedRegionLayout& layout) {
  {
    absl::MutexLock lock(&mu_);
    auto it = regions_.find(rank);
    if (it != regions_.end() && it->second.incarnation == incarnation &&
        it->second.memory->pid() == pid && it->second.memory->nonce() == nonce &&
        it->second.layout.total_params == layout.total_params &&
        it->second.layout.slots == layout.slots) {
      return absl::OkStatus();  // a retry
    }
  }
  // Opened without the lock: it reads /proc and maps memory.
  ASSIGN_OR_RETURN(std::unique_ptr<SharedMemory> memory,
                   SharedMemory::OpenPeer(pid, fd, nonce, layout.bytes()));
  absl::MutexLock lock(&mu_);
  regions_[rank] = Region{incarnation, layout, std::move(memory)};
  return absl::OkStatus();
}

void WorkerRegions::ForgetOthersThan(int rank, uint64_t incarnation) {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(rank);
  if (it != regions_.end() && it->second.incarnation != incarnation) regions_.erase(it);
}

absl::StatusOr<WorkerRegions::Region> WorkerRegions::Of(int rank, uint64_t incarnation) const {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(rank);
  if (it == regions_.end() || it->second.incarnation != incarnation) {
    return absl::AbortedError(absl::StrCat(
        "worker ", rank, " has no shared region attached to this shard process: register again"));
  }
  return it->second;
}

int WorkerRegions::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(regions_.size());
}

}  // namespace ps
