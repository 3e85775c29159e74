#include "common/storage/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace ps {

namespace {

constexpr absl::string_view kMagic = "PSCKPT01";
constexpr absl::string_view kTrailer = "PSCKEND1";
constexpr absl::string_view kPrefix = "ckpt-";
constexpr absl::string_view kSuffix = ".ps";
constexpr absl::string_view kTmpPrefix = ".tmp-";

uint32_t Crc32(absl::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths: feed large payloads in pieces.
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t n = std::min<size_t>(bytes.size() - at, 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), static_cast<uInt>(n));
    at += n;
  }
  return static_cast<uint32_t>(crc);
}

absl::Status ErrnoError(const std::string& what) {
  const int e = errno;
  const std::string message = absl::StrCat(what, ": ", std::strerror(e));
  if (e == EACCES || e == EPERM || e == EROFS) return absl::PermissionDeniedError(message);
  if (e == ENOSPC || e == EDQUOT) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

// Writes all of `bytes` to `fd`, through short writes and EINTR.
absl::Status WriteAll(int fd, absl::string_view bytes, const std::string& path) {
  size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + at, bytes.size() - at);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write " + path);
    }
    at += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status FsyncPath(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open " + path);
  const int rc = ::fsync(fd);
  absl::Status s = rc == 0 ? absl::OkStatus() : ErrnoError("fsync " + path);
  ::close(fd);
  return s;
}

constexpr absl::string_view kBaseMark = ".on-";

std::string NameOf(uint64_t sequence, uint64_t base) {
  if (base == CheckpointDir::kNoBase) {
    return absl::StrFormat("%s%020u%s", kPrefix, sequence, kSuffix);
  }
  return absl::StrFormat("%s%020u%s%020u%s", kPrefix, sequence, kBaseMark, base, kSuffix);
}

// A checkpoint's number and base from its file name; false for any other file.
bool ParseName(absl::string_view name, uint64_t* sequence, std::optional<uint64_t>* base) {
  if (!absl::ConsumePrefix(&name, kPrefix) || !absl::ConsumeSuffix(&name, kSuffix)) return false;
  const size_t mark = name.find(kBaseMark);
  base->reset();
  if (mark != absl::string_view::npos) {
    uint64_t b = 0;
    if (!absl::SimpleAtoi(name.substr(mark + kBaseMark.size()), &b)) return false;
    *base = b;
    name = name.substr(0, mark);
  }
  return absl::SimpleAtoi(name, sequence);
}

}  // namespace

template <typename T>
void ByteWriter::Put(T v) {
  for (size_t i = 0; i < sizeof(T); ++i) bytes_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void ByteWriter::U32(uint32_t v) { Put(v); }
void ByteWriter::U64(uint64_t v) { Put(v); }

void ByteWriter::Floats(absl::Span<const float> values) {
  static_assert(sizeof(float) == 4, "float32 payloads");
  U64(values.size());
  // The machines this runs on are little-endian (x86-64, aarch64), like the wire format.
  if (!values.empty()) {
    bytes_.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  }
}

void ByteWriter::I64s(absl::Span<const int64_t> values) {
  U64(values.size());
  for (int64_t v : values) I64(v);
}

void ByteWriter::U16s(absl::Span<const uint16_t> values) {
  U64(values.size());
  for (uint16_t v : values) Put(v);
}

absl::Status ByteReader::Need(uint64_t n, const char* what) const {
  if (n > remaining()) {
    return absl::DataLossError(absl::StrCat("checkpoint payload ends inside ", what, " (needs ", n,
                                            " bytes, ", remaining(), " left)"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<T> ByteReader::Get(const char* what) {
  absl::Status s = Need(sizeof(T), what);
  if (!s.ok()) return s;
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= T{static_cast<uint8_t>(bytes_[at_++])} << (8 * i);
  return v;
}

absl::StatusOr<uint8_t> ByteReader::U8(const char* what) { return Get<uint8_t>(what); }
absl::StatusOr<uint32_t> ByteReader::U32(const char* what) { return Get<uint32_t>(what); }
absl::StatusOr<uint64_t> ByteReader::U64(const char* what) { return Get<uint64_t>(what); }

absl::StatusOr<int64_t> ByteReader::I64(const char* what) {
  absl::StatusOr<uint64_t> v = U64(what);
  if (!v.ok()) return v.status();
  return static_cast<int64_t>(*v);
}

absl::StatusOr<uint64_t> ByteReader::Count(const char* what, uint64_t max_count,
                                           size_t element_size) {
  absl::StatusOr<uint64_t> n = U64(what);
  if (!n.ok()) return n.status();
  if (*n > max_count) {
    return absl::DataLossError(
        absl::StrCat("checkpoint names ", *n, " values for ", what, ", at most ", max_count));
  }
  absl::Status s = Need(*n * element_size, what);
  if (!s.ok()) return s;
  return *n;
}

absl::StatusOr<std::vector<float>> ByteReader::Floats(const char* what, uint64_t max_count) {
  absl::StatusOr<uint64_t> n = Count(what, max_count, sizeof(float));
  if (!n.ok()) return n.status();
  std::vector<float> out(*n);
  if (*n > 0) std::memcpy(out.data(), bytes_.data() + at_, *n * sizeof(float));
  at_ += *n * sizeof(float);
  return out;
}

absl::StatusOr<std::vector<int64_t>> ByteReader::I64s(const char* what, uint64_t max_count) {
  absl::StatusOr<uint64_t> n = Count(what, max_count, sizeof(int64_t));
  if (!n.ok()) return n.status();
  std::vector<int64_t> out(*n);
  for (int64_t& v : out) v = static_cast<int64_t>(*Get<uint64_t>(what));
  return out;
}

absl::StatusOr<std::vector<uint16_t>> ByteReader::U16s(const char* what, uint64_t max_count) {
  absl::StatusOr<uint64_t> n = Count(what, max_count, sizeof(uint16_t));
  if (!n.ok()) return n.status();
  std::vector<uint16_t> out(*n);
  for (uint16_t& v : out) v = *Get<uint16_t>(what);
  return out;
}

std::string FrameCheckpoint(absl::string_view payload) {
  ByteWriter w;
  std::string out(kMagic);
  w.U64(payload.size());
  out += w.bytes();
  out.append(payload.data(), payload.size());
  ByteWriter tail;
  tail.U32(Crc32(payload));
  out += tail.bytes();
  out.append(kTrailer.data(), kTrailer.size());
  return out;
}

absl::StatusOr<std::string> UnframeCheckpoint(absl::string_view file) {
  const size_t overhead = kMagic.size() + 8 + 4 + kTrailer.size();
  if (file.size() < overhead) {
    return absl::DataLossError(absl::StrCat("truncated: ", file.size(), " bytes"));
  }
  if (file.substr(0, kMagic.size()) != kMagic) return absl::DataLossError("bad magic");
  ByteReader header(file.substr(kMagic.size(), 8));
  const uint64_t size = *header.U64("size");
  if (size != file.size() - overhead) {
    return absl::DataLossError(absl::StrCat("header says ", size, " payload bytes, the file holds ",
                                            file.size() - overhead));
  }
  const absl::string_view payload = file.substr(kMagic.size() + 8, size);
  ByteReader tail(file.substr(kMagic.size() + 8 + size, 4));
  const uint32_t crc = *tail.U32("crc");
  if (file.substr(file.size() - kTrailer.size()) != kTrailer) {
    return absl::DataLossError("bad trailer");
  }
  if (crc != Crc32(payload)) return absl::DataLossError("checksum mismatch");
  return std::string(payload);
}

absl::StatusOr<CheckpointDir> CheckpointDir::Open(const std::string& dir, int keep) {
  if (keep < 1) return absl::InvalidArgumentError(absl::StrCat("keep must be >= 1, got ", keep));
  if (dir.empty()) return absl::InvalidArgumentError("empty checkpoint folder");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create checkpoint folder ", dir, ": ", ec.message()));
  }
  // A writer that died mid-write leaves its temporary file; it was never a checkpoint.
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (absl::StartsWith(entry.path().filename().string(), kTmpPrefix)) {
      std::filesystem::remove(entry.path(), ec);
    }
  }
  return CheckpointDir(dir, keep);
}

std::vector<CheckpointInfo> CheckpointDir::List() const {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    CheckpointInfo info;
    if (!ParseName(entry.path().filename().string(), &info.sequence, &info.base)) continue;
    info.path = entry.path().string();
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const CheckpointInfo& a, const CheckpointInfo& b) {
    return a.sequence < b.sequence;
  });
  return out;
}

std::optional<CheckpointInfo> CheckpointDir::Find(uint64_t sequence) const {
  for (CheckpointInfo& c : List()) {
    if (c.sequence == sequence) return std::move(c);
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<std::string>> CheckpointDir::RemoveNewerThan(uint64_t sequence) const {
  std::vector<std::string> removed;
  for (const CheckpointInfo& c : List()) {
    if (c.sequence <= sequence) continue;
    if (::unlink(c.path.c_str()) != 0) return ErrnoError("remove " + c.path);
    removed.push_back(c.path);
  }
  if (!removed.empty()) {
    absl::Status synced = FsyncPath(dir_, O_RDONLY | O_DIRECTORY);
    if (!synced.ok()) return synced;
  }
  return removed;
}

absl::StatusOr<CheckpointInfo> CheckpointDir::Write(uint64_t sequence, absl::string_view payload,
                                                    uint64_t base) const {
  const std::string name = NameOf(sequence, base);
  const std::string final_path = absl::StrCat(dir_, "/", name);
  const std::string tmp_path = absl::StrCat(dir_, "/", kTmpPrefix, name);
  const std::string framed = FrameCheckpoint(payload);
  const int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("create " + tmp_path);
  absl::Status s = WriteAll(fd, framed, tmp_path);
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoError("fsync " + tmp_path);
  if (::close(fd) != 0 && s.ok()) s = ErrnoError("close " + tmp_path);
  if (s.ok() && ::rename(tmp_path.c_str(), final_path.c_str()) != 0) {
    s = ErrnoError("rename to " + final_path);
  }
  if (!s.ok()) {
    ::unlink(tmp_path.c_str());
    return s;
  }
  // The rename is durable only once the folder's entry is on disk.
  absl::Status synced = FsyncPath(dir_, O_RDONLY | O_DIRECTORY);
  if (!synced.ok()) return synced;
  // Pruning: the newest `keep_`, and the full checkpoints they build on; and any other file of
  // this number (the one replaced, if its base differed) goes too.
  std::vector<CheckpointInfo> all = List();
  absl::flat_hash_set<uint64_t> kept;
  for (size_t i = all.size() > static_cast<size_t>(keep_) ? all.size() - keep_ : 0; i < all.size();
       ++i) {
    kept.insert(all[i].sequence);
    if (all[i].base.has_value()) kept.insert(*all[i].base);
  }
  for (const CheckpointInfo& c : all) {
    const bool replaced = c.sequence == sequence && c.path != final_path;
    if (replaced || !kept.contains(c.sequence)) ::unlink(c.path.c_str());
  }
  return CheckpointInfo{final_path, sequence,
                        base == kNoBase ? std::nullopt : std::optional<uint64_t>(base)};
}

namespace {

// The file's bytes; false when it cannot be opened.
bool ReadWhole(const std::string& path, std::string* bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    bytes->append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

}  // namespace

absl::StatusOr<std::string> CheckpointDir::Load(uint64_t sequence) const {
  const std::optional<CheckpointInfo> found = Find(sequence);
  if (!found.has_value()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint ", sequence, " in ", dir_));
  }
  const std::string& path = found->path;
  std::string bytes;
  if (!ReadWhole(path, &bytes)) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  absl::StatusOr<std::string> payload = UnframeCheckpoint(bytes);
  if (!payload.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": ", payload.status().message()));
  }
  return payload;
}

absl::Status CheckpointDir::CheckRestorable(uint64_t sequence) const {
  const std::optional<CheckpointInfo> found = Find(sequence);
  if (!found.has_value()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint ", sequence, " in ", dir_));
  }
  absl::Status intact = Load(sequence).status();
  if (intact.ok() && found->base.has_value()) intact = Load(*found->base).status();
  return intact;
}

absl::StatusOr<CheckpointDir::Loaded> CheckpointDir::LoadNewest(std::vector<std::string>* skipped,
                                                                const Acceptor& accept) const {
  std::vector<CheckpointInfo> all = List();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    std::string bytes;
    if (!ReadWhole(it->path, &bytes)) {
      if (skipped != nullptr) skipped->push_back(it->path + ": cannot open");
      continue;
    }
    absl::StatusOr<std::string> payload = UnframeCheckpoint(bytes);
    if (!payload.ok()) {
      ::rename(it->path.c_str(), (it->path + ".corrupt").c_str());
      if (skipped != nullptr) {
        skipped->push_back(
            absl::StrCat(it->path, ": ", payload.status().message(), " (renamed to .corrupt)"));
      }
      continue;
    }
    Loaded loaded{*it, *std::move(payload)};
    if (accept) {
      const absl::Status taken = accept(loaded);
      if (taken.code() == absl::StatusCode::kDataLoss ||
          taken.code() == absl::StatusCode::kNotFound) {
        if (skipped != nullptr) skipped->push_back(absl::StrCat(it->path, ": ", taken.message()));
        continue;
      }
      if (!taken.ok()) return taken;
    }
    return loaded;
  }
  return absl::NotFoundError(absl::StrCat("no intact checkpoint in ", dir_));
}

std::optional<uint64_t> NewestCommonRestorable(absl::Span<const CheckpointDir> dirs,
                                               RestorableCheck check) {
  if (dirs.empty()) return std::nullopt;
  const auto restorable = [check](const CheckpointDir& d, uint64_t sequence) {
    if (check == RestorableCheck::kIntact) return d.CheckRestorable(sequence).ok();
    const std::optional<CheckpointInfo> found = d.Find(sequence);
    return found.has_value() && (!found->base.has_value() || d.Find(*found->base).has_value());
  };
  const std::vector<CheckpointInfo> first = dirs[0].List();
  for (auto it = first.rbegin(); it != first.rend(); ++it) {
    const bool everywhere = std::all_of(dirs.begin(), dirs.end(), [&](const CheckpointDir& d) {
      return restorable(d, it->sequence);
    });
    if (everywhere) return it->sequence;
  }
  return std::nullopt;
}

}  // namespace ps
