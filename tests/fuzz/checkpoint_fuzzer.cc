// Fuzzes what a shard reads from disk at start: the checkpoint frame and the snapshot inside.
// Arbitrary bytes must give an error (DATA_LOSS or FAILED_PRECONDITION) or a restore, never a
// crash, a sanitizer report or a huge allocation; a failed restore leaves the shard fresh; a
// successful one re-encodes to the same bytes when they are of the current format, and an older
// format (still read, for upgrades) re-encodes in the current one, which must restore to a shard
// that encodes those bytes again.

#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/storage/checkpoint.h"
#include "server/shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  (void)ps::UnframeCheckpoint(bytes);
  ps::ShardOptions o;
  o.consistency.mode =
      size > 0 ? static_cast<ps::ConsistencyMode>(data[0] % 3) : ps::ConsistencyMode::kBsp;
  o.consistency.num_workers = 2;
  o.optimizer.kind = ps::OptimizerKind::kAdam;
  auto shard = std::move(*ps::Shard::Create(o));
  const absl::Status s = shard->RestoreSnapshot(bytes);
  if (!s.ok()) {
    const ps::ShardStatus st = shard->GetStatus();
    if (st.initialized || st.version != 0 || st.restored_version != -1) std::abort();
    return 0;
  }
  const std::string encoded = shard->EncodeSnapshot().payload;
  if (encoded.compare(0, 4, bytes, 0, 4) == 0) {  // the same format: the same bytes
    if (encoded != bytes) std::abort();
    return 0;
  }
  auto again = std::move(*ps::Shard::Create(o));
  if (!again->RestoreSnapshot(encoded).ok()) std::abort();
  if (again->EncodeSnapshot().payload != encoded) std::abort();
  return 0;
}
