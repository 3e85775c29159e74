#ifndef PS_COMMON_NN_SPARSE_LOOKUP_H_
#define PS_COMMON_NN_SPARSE_LOOKUP_H_

// A micro-batch's sparse keys, deduplicated: what a worker pulls (each unique key once), which
// pulled row each lookup reads, and the lookups grouped by row so that a row's gradient is summed
// in one fixed order on every device (SparseBatch).

#include <cstdint>
#include <vector>

namespace ps {

struct SparseLookups {
  std::vector<uint64_t> unique_keys;  // in order of first appearance
  std::vector<int32_t> lookups;       // per key given: its index in unique_keys
  std::vector<int32_t> offsets;       // unique_keys.size() + 1
  std::vector<int32_t> positions;     // the lookups of row u: positions[offsets[u]..offsets[u+1])
};

// `n` keys (a micro-batch's (batch, fields) keys, row-major) deduplicated. Requires n < 2^31.
SparseLookups DeduplicateKeys(const uint64_t* keys, int64_t n);

}  // namespace ps

#endif  // PS_COMMON_NN_SPARSE_LOOKUP_H_
