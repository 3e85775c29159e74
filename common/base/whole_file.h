#ifndef PS_COMMON_BASE_WHOLE_FILE_H_
#define PS_COMMON_BASE_WHOLE_FILE_H_

// Files that readers poll for or take as a result (port files, summaries, weights, the data
// generator's truth): a reader sees the whole file or none, never one cut short by a failed
// write or a process stopped midway.

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ps {

// Writes `contents` to `path` as `path`.partial, then renames it over `path` (atomic within a
// file system). PERMISSION_DENIED when the partial file cannot be created (a missing or read-only
// folder), DATA_LOSS when the write, the close or the rename fails; on any failure the partial
// file is removed and `path` is left as it was. Not synced to disk: a machine that crashes may
// lose it whole (checkpoints, which must survive that, sync; common/storage/checkpoint.h).
absl::Status WriteWholeFile(const std::string& path, absl::string_view contents);
// The values' bytes as they are in memory (raw float32, this machine's byte order): --weights_out.
absl::Status WriteWholeFile(const std::string& path, absl::Span<const float> values);

// A port file (--port_file, --metrics_port_file): "<port>\n", whole, for launchers and tests that
// wait for it to appear. Nothing for an empty path. Errors as WriteWholeFile's, prefixed with
// `flag`.
absl::Status WritePortFile(absl::string_view flag, const std::string& path, int port);

}  // namespace ps

#endif  // PS_COMMON_BASE_WHOLE_FILE_H_
