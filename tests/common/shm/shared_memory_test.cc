// SharedMemory: a region made by one process is mapped by another from what it announced, and
// anything that is not exactly that region is refused before it is opened or mapped.

#include "common/shm/shared_memory.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(SharedMemory, APeerSeesTheOwnersBytesAndTheOwnerSeesThePeers) {
  auto owner = SharedMemory::Create(4096);
  ASSERT_TRUE(owner.ok()) << owner.status();
  EXPECT_EQ((*owner)->data()[100], 0);  // zero-filled
  std::memcpy((*owner)->data(), "gradient", 8);
  auto peer = SharedMemory::OpenPeer((*owner)->pid(), (*owner)->fd(), (*owner)->nonce(), 4096);
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(std::memcmp((*peer)->data(), "gradient", 8), 0);
  std::memcpy((*peer)->data() + 2048, "weights", 7);
  EXPECT_EQ(std::memcmp((*owner)->data() + 2048, "weights", 7), 0);
  EXPECT_EQ((*peer)->fd(), -1);
}

// The owner is another process: what a shard does with a worker's region.
TEST(SharedMemory, WorksAcrossProcesses) {
  int to_parent[2], to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto region = SharedMemory::Create(1 << 20);
    if (!region.ok()) _exit(1);
    std::memcpy((*region)->data() + 12345, "from the child", 14);
    const int64_t announce[3] = {(*region)->pid(), (*region)->fd(),
                                 static_cast<int64_t>((*region)->nonce())};
    if (write(to_parent[1], announce, sizeof(announce)) != sizeof(announce)) _exit(2);
    char go;
    if (read(to_child[0], &go, 1) != 1) _exit(3);  // keep the region until the parent is done
    _exit(std::memcmp((*region)->data() + 999, "from the parent", 15) == 0 ? 0 : 4);
  }
  int64_t announce[3];
  ASSERT_EQ(read(to_parent[0], announce, sizeof(announce)), static_cast<ssize_t>(sizeof(announce)));
  auto peer =
      SharedMemory::OpenPeer(announce[0], announce[1], static_cast<uint64_t>(announce[2]), 1 << 20);
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(std::memcmp((*peer)->data() + 12345, "from the child", 14), 0);
  std::memcpy((*peer)->data() + 999, "from the parent", 15);
  ASSERT_EQ(write(to_child[1], "g", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) close(fd);
}

TEST(SharedMemory, AnythingButTheAnnouncedRegionIsRefused) {
  auto owner = SharedMemory::Create(4096);
  ASSERT_TRUE(owner.ok()) << owner.status();
  const int64_t pid = (*owner)->pid();
  const int fd = (*owner)->fd();
  const uint64_t nonce = (*owner)->nonce();
  // Another nonce: a region of another worker, or a reused descriptor number.
  EXPECT_EQ(SharedMemory::OpenPeer(pid, fd, nonce ^ 1, 4096).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Another size: the peer would read past the end.
  EXPECT_EQ(SharedMemory::OpenPeer(pid, fd, nonce, 8192).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A descriptor that is not a region at all (opened, it could block or act).
  const int devnull = open("/dev/null", O_RDWR);
  ASSERT_GE(devnull, 0);
  EXPECT_EQ(SharedMemory::OpenPeer(pid, devnull, nonce, 4096).status().code(),
            absl::StatusCode::kFailedPrecondition);
  close(devnull);
  // No such descriptor, no such process (another host or PID namespace).
  EXPECT_EQ(SharedMemory::OpenPeer(pid, 1 << 29, nonce, 4096).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(SharedMemory::OpenPeer(1 << 30, fd, nonce, 4096).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Values no region can have.
  EXPECT_EQ(SharedMemory::OpenPeer(0, fd, nonce, 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemory::OpenPeer(pid, fd, 0, 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemory::OpenPeer(pid, fd, nonce, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemory::Create(0).status().code(), absl::StatusCode::kInvalidArgument);
}

// The size is sealed: a worker cannot shrink its region under a shard's mapping (the shard's
// reads would fault with SIGBUS).
TEST(SharedMemory, TheRegionCannotBeResized) {
  auto owner = SharedMemory::Create(4096);
  ASSERT_TRUE(owner.ok()) << owner.status();
  EXPECT_NE(ftruncate((*owner)->fd(), 0), 0);
  EXPECT_NE(ftruncate((*owner)->fd(), 8192), 0);
}

}  // namespace
}  // namespace ps
