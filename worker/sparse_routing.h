#ifndef PS_WORKER_SPARSE_ROUTING_H_
#define PS_WORKER_SPARSE_ROUTING_H_

// A data call's sparse rows cut by owning shard (ShardOfKey), as the wire carries them, and the
// way back: each shard's answer scattered into the caller's buffers. Pure functions.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/base/param_layout.h"
#include "proto/parameter_server.pb.h"
#include "worker/parameter_client.h"

namespace ps {

// One shard's part of one of the caller's lists: the keys it owns and where each sits in the
// caller's list `source`.
struct RoutedRows {
  int source = 0;
  int table = 0;
  std::vector<uint64_t> keys;
  std::vector<int32_t> at;
};
// Per shard, its parts of the caller's lists (lists with no key there are left out).
using RowsByShard = std::vector<std::vector<RoutedRows>>;

// INVALID_ARGUMENT for an unknown table or values of another length than keys x dim.
absl::Status CheckRows(absl::Span<const RowsToPull> rows,
                       const std::vector<SparseTableSpec>& tables);
absl::Status CheckRows(absl::Span<const RowsToPush> rows,
                       const std::vector<SparseTableSpec>& tables);

RowsByShard RoutePull(absl::Span<const RowsToPull> rows, int num_shards);
RowsByShard RoutePush(absl::Span<const RowsToPush> rows, int num_shards);

// Adds one shard's rows to its request: keys (a pull), or keys and their gradients (a push).
void AddPullRows(const std::vector<RoutedRows>& routed,
                 google::protobuf::RepeatedPtrField<ps::v1::SparseRows>* out);
void AddPushRows(const std::vector<RoutedRows>& routed, absl::Span<const RowsToPush> rows,
                 const std::vector<SparseTableSpec>& tables,
                 google::protobuf::RepeatedPtrField<ps::v1::SparseRows>* out);

// Writes a shard's answer into the caller's rows; DATA_LOSS when it does not match what was
// asked (entries, tables, keys, lengths).
absl::Status ScatterPulledRows(const std::vector<RoutedRows>& routed,
                               const google::protobuf::RepeatedPtrField<ps::v1::SparseRows>& got,
                               absl::Span<const RowsToPull> rows,
                               const std::vector<SparseTableSpec>& tables);

}  // namespace ps

#endif  // PS_WORKER_SPARSE_ROUTING_H_
