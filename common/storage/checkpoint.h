#ifndef PS_COMMON_STORAGE_CHECKPOINT_H_
#define PS_COMMON_STORAGE_CHECKPOINT_H_

// Durable checkpoint files: a framed, checksummed payload written so that a crash at any moment
// leaves either the previous set of checkpoints or the new one, never a torn file under a
// checkpoint's name.
//
// File format (all integers little-endian):
//   "PSCKPT01"            8-byte magic
//   u64 payload_size
//   payload               payload_size bytes, opaque here (see ByteWriter / ByteReader)
//   u32 crc32(payload)    zlib's CRC-32
//   "PSCKEND1"            8-byte trailer
// A file whose magic, size, checksum or trailer does not match is corrupt and never loaded.
//
// Writing: payload to "<dir>/.tmp-<name>", fsync, close, rename to "<dir>/<name>", fsync of the
// folder; then the oldest files beyond `keep` are removed, except the bases of those kept. Names
// are "ckpt-<20-digit sequence>.ps", so the newest checkpoint sorts last, and for an incremental
// checkpoint "ckpt-<20-digit sequence>.on-<20-digit base>.ps": the folder's listing shows which
// full checkpoint each one needs.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ps {

// Appends little-endian primitives and float arrays to a byte string.
class ByteWriter {
 public:
  void U8(uint8_t v) { bytes_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v);
  void U64(uint64_t v);
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  // A length (u64) followed by the floats.
  void Floats(absl::Span<const float> values);
  void I64s(absl::Span<const int64_t> values);
  void U16s(absl::Span<const uint16_t> values);
  const std::string& bytes() const { return bytes_; }
  std::string Release() { return std::move(bytes_); }

 private:
  template <typename T>
  void Put(T v);  // little-endian
  std::string bytes_;
};

// Reads what a ByteWriter wrote. Every read checks the bounds: a short or malformed payload is
// DATA_LOSS naming what was being read, never a read past the end.
class ByteReader {
 public:
  explicit ByteReader(absl::string_view bytes) : bytes_(bytes) {}
  absl::StatusOr<uint8_t> U8(const char* what);
  absl::StatusOr<uint32_t> U32(const char* what);
  absl::StatusOr<uint64_t> U64(const char* what);
  absl::StatusOr<int64_t> I64(const char* what);
  // At most `max_count` values (DATA_LOSS beyond: a corrupt length must not allocate wildly).
  absl::StatusOr<std::vector<float>> Floats(const char* what, uint64_t max_count);
  absl::StatusOr<std::vector<int64_t>> I64s(const char* what, uint64_t max_count);
  absl::StatusOr<std::vector<uint16_t>> U16s(const char* what, uint64_t max_count);
  size_t remaining() const { return bytes_.size() - at_; }

 private:
  absl::Status Need(uint64_t n, const char* what) const;
  template <typename T>
  absl::StatusOr<T> Get(const char* what);  // little-endian
  // Reads an element count (<= max_count) and checks that its elements are all there.
  absl::StatusOr<uint64_t> Count(const char* what, uint64_t max_count, size_t element_size);
  absl::string_view bytes_;
  size_t at_ = 0;
};

// Frames a payload as a checkpoint file's bytes, and checks and unframes one (DATA_LOSS with the
// reason when the bytes are not a whole, intact checkpoint).
std::string FrameCheckpoint(absl::string_view payload);
absl::StatusOr<std::string> UnframeCheckpoint(absl::string_view file_bytes);

struct CheckpointInfo {
  std::string path;
  uint64_t sequence = 0;
  std::optional<uint64_t> base;  // the full checkpoint an incremental one builds on
};

class CheckpointDir {
 public:
  // Creates `dir` if needed. INVALID_ARGUMENT for keep < 1; PERMISSION_DENIED or INTERNAL when
  // the folder cannot be made.
  static absl::StatusOr<CheckpointDir> Open(const std::string& dir, int keep);
  // `dir` to read (List, Find, Load, CheckRestorable) while its writer may still run: unlike
  // Open(), it creates and removes nothing, so a checkpoint being written is left alone. Not
  // for Write().
  static CheckpointDir ForReading(const std::string& dir) { return CheckpointDir(dir, 1); }

  // Durably writes checkpoint number `sequence` (a growing number, e.g. the shard's version; an
  // existing file of that number is replaced), incremental over checkpoint number `base` when
  // given, and then removes all but the newest `keep` and the full checkpoints they build on.
  static constexpr uint64_t kNoBase = ~uint64_t{0};
  absl::StatusOr<CheckpointInfo> Write(uint64_t sequence, absl::string_view payload,
                                       uint64_t base = kNoBase) const;

  // The payload of the newest intact checkpoint that `accept` takes, trying older ones when a
  // newer one is corrupt or refused. Each corrupt file is renamed to "<name>.corrupt" (kept for
  // inspection, out of the way of newer checkpoints and of the keep-k pruning); a refusal of
  // DATA_LOSS or NOT_FOUND (say, an incremental checkpoint whose base is gone) skips the file,
  // any other is returned. Both are reported through `skipped`, if given. NOT_FOUND when none
  // is left.
  struct Loaded {
    CheckpointInfo info;
    std::string payload;
  };
  using Acceptor = std::function<absl::Status(const Loaded&)>;
  absl::StatusOr<Loaded> LoadNewest(std::vector<std::string>* skipped = nullptr,
                                    const Acceptor& accept = nullptr) const;
  // The payload of checkpoint number `sequence`: NOT_FOUND when there is none, DATA_LOSS when it
  // is not intact.
  absl::StatusOr<std::string> Load(uint64_t sequence) const;
  // OK when checkpoint number `sequence` and, if it is incremental, its base are there intact
  // (their checksums read); Load()'s NOT_FOUND or DATA_LOSS otherwise. Renames nothing.
  absl::Status CheckRestorable(uint64_t sequence) const;

  // Checkpoint files, oldest first (leftover temporary files are not listed).
  std::vector<CheckpointInfo> List() const;
  // Checkpoint number `sequence`, if there is one.
  std::optional<CheckpointInfo> Find(uint64_t sequence) const;
  // Removes every checkpoint numbered above `sequence` (a state the run went back from, which a
  // later restart must not restore) and returns their paths; an error naming a file that could
  // not be removed.
  absl::StatusOr<std::vector<std::string>> RemoveNewerThan(uint64_t sequence) const;
  const std::string& dir() const { return dir_; }

 private:
  CheckpointDir(std::string dir, int keep) : dir_(std::move(dir)), keep_(keep) {}
  std::string dir_;
  int keep_;
};

// How NewestCommonRestorable judges a checkpoint: kListed by the folder's listing alone (it and
// its base are there), kIntact by reading them too (CheckRestorable).
enum class RestorableCheck { kListed, kIntact };

// The newest checkpoint number that every folder can restore, if there is one: the state that
// shards which checkpoint at the same numbers (BSP's cuts) can all go back to.
std::optional<uint64_t> NewestCommonRestorable(absl::Span<const CheckpointDir> dirs,
                                               RestorableCheck check = RestorableCheck::kIntact);

}  // namespace ps

#endif  // PS_COMMON_STORAGE_CHECKPOINT_H_
