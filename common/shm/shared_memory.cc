#include "common/shm/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ps {

namespace {

// The memfd's name; /proc/<pid>/fd/<fd> of such a file reads "/memfd:<name> (deleted)".
std::string RegionName(uint64_t nonce) { return absl::StrFormat("ps-shared-%016x", nonce); }

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

constexpr int kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

}  // namespace

absl::StatusOr<std::unique_ptr<SharedMemory>> SharedMemory::Create(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("a shared region needs at least one byte");
  std::random_device rd;
  uint64_t nonce = 0;
  while (nonce == 0) nonce = (uint64_t{rd()} << 32) ^ rd();
  const int fd = memfd_create(RegionName(nonce).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Errno("memfd_create");
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      fcntl(fd, F_ADD_SEALS, kRequiredSeals) != 0) {
    absl::Status s = Errno("sizing and sealing the shared region");
    close(fd);
    return s;
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    absl::Status s = Errno(absl::StrCat("mapping ", bytes, " shared bytes"));
    close(fd);
    return s;
  }
  return std::unique_ptr<SharedMemory>(
      new SharedMemory(static_cast<char*>(data), bytes, getpid(), fd, nonce));
}

absl::StatusOr<std::unique_ptr<SharedMemory>> SharedMemory::OpenPeer(int64_t pid, int64_t fd,
                                                                     uint64_t nonce,
                                                                     int64_t bytes) {
  if (pid <= 0 || fd < 0 || fd > (1 << 30) || nonce == 0 || bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("no shared region has pid ", pid, ", fd ", fd,
                                                   ", nonce ", nonce, " and ", bytes, " bytes"));
  }
  const std::string path = absl::StrCat("/proc/", pid, "/fd/", fd);
  // The link is checked before the file is opened: opening an arbitrary descriptor of another
  // process (a FIFO, a device) could block or have effects of its own.
  char link[256];
  const ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
  const std::string expected = absl::StrCat("/memfd:", RegionName(nonce), " (deleted)");
  if (n < 0 || std::string(link, static_cast<size_t>(n)) != expected) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is not the worker's shared region (", n < 0 ? std::strerror(errno) : "another file",
        "): the worker runs on another host or in another PID namespace"));
  }
  const int opened = open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (opened < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  struct stat st {};
  const int seals = fcntl(opened, F_GET_SEALS);
  if (fstat(opened, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != bytes || seals < 0 ||
      (seals & kRequiredSeals) != kRequiredSeals) {
    close(opened);
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a sealed region of ", bytes,
                                                      " bytes (", static_cast<int64_t>(st.st_size),
                                                      " bytes, seals ", seals, ")"));
  }
  void* data =
      mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, opened, 0);
  close(opened);  // the mapping keeps the memory
  if (data == MAP_FAILED) return Errno(absl::StrCat("mapping ", path));
  return std::unique_ptr<SharedMemory>(
      new SharedMemory(static_cast<char*>(data), static_cast<size_t>(bytes), pid, -1, nonce));
}

SharedMemory::~SharedMemory() {
  munmap(data_, size_);
  if (fd_ >= 0) close(fd_);
}

}  // namespace ps
