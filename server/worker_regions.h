#ifndef PS_SERVER_WORKER_REGIONS_H_
#define PS_SERVER_WORKER_REGIONS_H_

// The shared-memory regions that worker processes on this host attached to this shard process
// (the proto's AttachSharedMemory): one per rank, owned by the rank's current process (its
// incarnation). A handler holds a region's memory while it uses it, so a region forgotten
// meanwhile is unmapped only after. Thread-safe.

#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/shm/shared_memory.h"
#include "common/shm/shared_region_layout.h"

namespace ps {

class WorkerRegions {
 public:
  struct Region {
    uint64_t incarnation = 0;  // the worker process that attached it
    SharedRegionLayout layout;
    std::shared_ptr<SharedMemory> memory;
    // Element `begin` of `area` in slot `slot`.
    char* At(int slot, RegionArea area, int64_t begin) const {
      return memory->data() + layout.Offset(slot, area, begin);
    }
  };

  // Opens the region worker process `incarnation` of `rank` announced (its pid, descriptor and
  // nonce; see SharedMemory::OpenPeer) and makes it the rank's. A retry of the attachment in
  // place is OK at once.
  absl::Status Attach(int rank, uint64_t incarnation, int64_t pid, int64_t fd, uint64_t nonce,
                      const SharedRegionLayout& layout);
  // A new process registered at `rank`: the old one's region goes.
  void ForgetOthersThan(int rank, uint64_t incarnation);
  // The region of `rank` if `incarnation` attached it; ABORTED (register again) otherwise.
  absl::StatusOr<Region> Of(int rank, uint64_t incarnation) const;
  int size() const;

 private:
  mutable absl::Mutex mu_;
  std::map<int, Region> regions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_SERVER_WORKER_REGIONS_H_
