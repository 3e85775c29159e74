#include "worker/transfer_flags.h"

#include <cstdint>

#include "absl/flags/flag.h"
#include "worker/worker_flags.h"

namespace ps {

absl::Status CheckTransferFlags() {
  // Written so that NaN fails too.
  if (!(absl::GetFlag(FLAGS_chunk_mib) >= 0) || !(absl::GetFlag(FLAGS_push_pull_split_mib) >= 0) ||
      absl::GetFlag(FLAGS_connections) < 1) {
    return absl::InvalidArgumentError(
        "--chunk_mib and --push_pull_split_mib must be >= 0, --connections >= 1");
  }
  return absl::OkStatus();
}

absl::Status SetTransferFromFlags(GrpcClientOptions& o) {
  if (absl::Status s = CheckTransferFlags(); !s.ok()) return s;
  constexpr double kMiB = 1 << 20;
  o.chunk_bytes = static_cast<int64_t>(absl::GetFlag(FLAGS_chunk_mib) * kMiB);
  o.connections = absl::GetFlag(FLAGS_connections);
  o.split_lone_pulls = absl::GetFlag(FLAGS_split_lone_pulls);
  o.split_lone_pushes = absl::GetFlag(FLAGS_split_lone_pushes);
  o.push_pull_split_bytes = static_cast<int64_t>(absl::GetFlag(FLAGS_push_pull_split_mib) * kMiB);
  return absl::OkStatus();
}

}  // namespace ps
