#include "worker/piece_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ps {

int64_t LoneChunkBytes(int64_t bytes) {
  constexpr int64_t kSplitFrom = int64_t{512} << 10;
  constexpr int64_t kLargest = int64_t{2} << 20;
  if (bytes < kSplitFrom) return 0;
  return std::min(kLargest, (bytes / 2 + 3) / 4 * 4);
}

absl::StatusOr<std::vector<Piece>> PlanPieces(absl::Span<const KeyRange> parts,
                                              const PiecePlanOptions& options) {
  std::vector<Piece> pieces;
  std::vector<int64_t> next_connection(options.num_shards, 0);
  const int64_t max_chunk = options.chunk_bytes / static_cast<int64_t>(sizeof(float));
  for (size_t p = 0; p < parts.size(); ++p) {
    const KeyRange part = parts[p];
    if (part.begin < 0 || part.end > options.total_params || part.begin >= part.end) {
      return absl::InvalidArgumentError(absl::StrCat("part [", part.begin, ", ", part.end,
                                                     ") is empty or outside the layout of ",
                                                     options.total_params));
    }
    for (int s = 0; s < options.num_shards; ++s) {
      const KeyRange r = ShardRange(options.total_params, options.num_shards, s);
      const KeyRange cut{std::max(r.begin, part.begin), std::min(r.end, part.end)};
      const bool empty_inside = r.begin == r.end && part.begin <= r.begin && r.end <= part.end;
      if (!(cut.begin < cut.end || empty_inside)) continue;
      if (cut.begin >= cut.end) {
        pieces.push_back(Piece{p, s, 0, r});
        continue;
      }
      // Equal chunks of at most chunk_bytes, spread over the shard's connections.
      const int64_t n = cut.size();
      const int64_t chunks = max_chunk > 0 ? (n + max_chunk - 1) / max_chunk : 1;
      for (int64_t c = 0; c < chunks; ++c) {
        const KeyRange chunk{cut.begin + n * c / chunks, cut.begin + n * (c + 1) / chunks};
        pieces.push_back(
            Piece{p, s, static_cast<int>(next_connection[s]++ % options.connections), chunk});
      }
    }
  }
  return pieces;
}

}  // namespace ps
