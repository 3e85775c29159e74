#ifndef PS_WORKER_PIECE_PLAN_H_
#define PS_WORKER_PIECE_PLAN_H_

// How a transfer of parts of the flat parameter buffer is cut into calls: each part at the
// shards' boundaries (ShardRange), each shard's cut into chunks of at most chunk_bytes, the
// chunks spread over the shard's connections in turn. Pure: the client plans, then calls.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/base/param_layout.h"

namespace ps {

// One call's share of a transfer.
struct Piece {
  size_t part = 0;  // index of the part it belongs to
  int shard = 0;
  int connection = 0;  // which of the shard's connections carries it
  KeyRange range;
  bool operator==(const Piece& o) const {
    return part == o.part && shard == o.shard && connection == o.connection && range == o.range;
  }
};

struct PiecePlanOptions {
  int64_t total_params = 0;  // the layout's size
  int num_shards = 1;
  int64_t chunk_bytes = 0;  // largest float32 chunk per call; 0: one call per shard and part
  int connections = 1;      // per shard
};

// A pull or push of `bytes` with a worker's only shard (GrpcClientOptions::split_lone_pulls,
// split_lone_pushes): the chunk size that cuts it into calls for two connections, at least two
// and each at most 2 MiB, a multiple of 4 bytes; 0 below 512 KiB, which goes whole (a round trip
// more would cost more).
int64_t LoneChunkBytes(int64_t bytes);

// From this many bytes, a PushPull with a lone shard whose transfers split goes as a split push
// and then a split pull (two round trips) instead of one whole call. Across a veth pair the two
// calls trained a 12.8 MB GPT 2-4 % faster and the 0.7-0.9 MiB MLP 2-4 % slower
// (docs/performance.md).
inline constexpr int64_t kLonePushPullSplitFrom = int64_t{4} << 20;

// The pieces of `parts` (each non-empty and inside the layout: INVALID_ARGUMENT otherwise), in
// part order, then shard order, then chunk order. A shard whose range is empty (more shards than
// parameters) and lies inside a part still gets a piece, so it hears of the clock.
absl::StatusOr<std::vector<Piece>> PlanPieces(absl::Span<const KeyRange> parts,
                                              const PiecePlanOptions& options);

}  // namespace ps

#endif  // PS_WORKER_PIECE_PLAN_H_
