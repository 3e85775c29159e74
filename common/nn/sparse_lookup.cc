#include "common/nn/sparse_lookup.h"

#include "absl/container/flat_hash_map.h"

namespace ps {

SparseLookups DeduplicateKeys(const uint64_t* keys, int64_t n) {
  SparseLookups out;
  out.lookups.resize(n);
  absl::flat_hash_map<uint64_t, int32_t> row_of;
  row_of.reserve(n);
  std::vector<int32_t> count;
  for (int64_t i = 0; i < n; ++i) {
    auto [it, inserted] = row_of.try_emplace(keys[i], static_cast<int32_t>(out.unique_keys.size()));
    if (inserted) {
      out.unique_keys.push_back(keys[i]);
      count.push_back(0);
    }
    out.lookups[i] = it->second;
    ++count[it->second];
  }
  // Counting sort of the positions by row: each row's positions stay increasing.
  out.offsets.assign(out.unique_keys.size() + 1, 0);
  for (size_t u = 0; u < count.size(); ++u) out.offsets[u + 1] = out.offsets[u] + count[u];
  out.positions.resize(n);
  std::vector<int32_t> next(out.offsets.begin(), out.offsets.end() - 1);
  for (int64_t i = 0; i < n; ++i) out.positions[next[out.lookups[i]]++] = static_cast<int32_t>(i);
  return out;
}

}  // namespace ps
