#include "common/base/whole_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ps {

absl::Status WriteWholeFile(const std::string& path, absl::string_view contents) {
  const std::string partial = path + ".partial";
  std::FILE* f = std::fopen(partial.c_str(), "wb");
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", partial, ": ", std::strerror(errno)));
  }
  const bool written = std::fwrite(contents.data(), 1, contents.size(), f) == contents.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed || std::rename(partial.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(partial.c_str());
    return absl::DataLossError(absl::StrCat("cannot write ", path, ": ", reason));
  }
  return absl::OkStatus();
}

absl::Status WriteWholeFile(const std::string& path, absl::Span<const float> values) {
  return WriteWholeFile(path, absl::string_view(reinterpret_cast<const char*>(values.data()),
                                                values.size() * sizeof(float)));
}

absl::Status WritePortFile(absl::string_view flag, const std::string& path, int port) {
  if (path.empty()) return absl::OkStatus();
  const absl::Status written = WriteWholeFile(path, absl::StrCat(port, "\n"));
  if (written.ok()) return written;
  return absl::Status(written.code(), absl::StrCat(flag, ": ", written.message()));
}

}  // namespace ps
