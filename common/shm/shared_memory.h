#ifndef PS_COMMON_SHM_SHARED_MEMORY_H_
#define PS_COMMON_SHM_SHARED_MEMORY_H_

// Memory one process shares with another on the same host, for the payloads of pushes and pulls
// between a worker and the shards it runs next to (the data plane BytePS and NCCL use within a
// machine; gRPC stays the control plane).
//
// The owner (a worker) creates an anonymous memfd, sizes it and seals its size (F_SEAL_SHRINK,
// F_SEAL_GROW, F_SEAL_SEAL), so no one can truncate it under a peer's mapping (which would make
// the peer's reads SIGBUS). A peer (a shard) opens it through /proc/<pid>/fd/<fd>, which only
// works on the same host, in the same PID namespace, for the same user; it accepts the file only
// if the link names the memfd with the owner's random nonce, the file is a sealed memfd of the
// announced size, and so a wrong pid or fd (another host, another container) is refused instead
// of opening someone else's file. The memory lives until the owner and every peer have unmapped
// it; nothing is ever left behind in a file system.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace ps {

class SharedMemory {
 public:
  // A new zero-filled, sealed region of `bytes` (> 0) bytes, mapped read-write.
  static absl::StatusOr<std::unique_ptr<SharedMemory>> Create(size_t bytes);
  // Maps the region another process created with Create, given what it announced.
  // FAILED_PRECONDITION when the file is not there or not that region (another host, another
  // PID namespace, a reused pid, a wrong size or missing seals); INVALID_ARGUMENT for values no
  // region can have.
  static absl::StatusOr<std::unique_ptr<SharedMemory>> OpenPeer(int64_t pid, int64_t fd,
                                                                uint64_t nonce, int64_t bytes);
  ~SharedMemory();
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  char* data() const { return data_; }
  size_t size() const { return size_; }
  // What a peer needs to open the region (meaningful for a region made by Create).
  int64_t pid() const { return pid_; }
  int fd() const { return fd_; }
  uint64_t nonce() const { return nonce_; }

 private:
  SharedMemory(char* data, size_t size, int64_t pid, int fd, uint64_t nonce)
      : data_(data), size_(size), pid_(pid), fd_(fd), nonce_(nonce) {}
  char* data_;
  size_t size_;
  int64_t pid_;
  int fd_;  // kept open by the owner (peers open it through /proc); -1 in a peer
  uint64_t nonce_;
};

}  // namespace ps

#endif  // PS_COMMON_SHM_SHARED_MEMORY_H_
