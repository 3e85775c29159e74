#include "worker/sparse_routing.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/optim/sparse_table.h"

namespace ps {

namespace {

template <typename Rows>
absl::Status CheckEach(absl::Span<const Rows> rows, const std::vector<SparseTableSpec>& tables,
                       size_t (*values)(const Rows&)) {
  for (const Rows& r : rows) {
    if (r.table < 0 || r.table >= static_cast<int>(tables.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("sparse table ", r.table, " of a model with ", tables.size()));
    }
    if (values(r) != r.keys.size() * static_cast<size_t>(tables[r.table].dim)) {
      return absl::InvalidArgumentError(
          absl::StrCat("table '", tables[r.table].name, "': ", values(r), " values for ",
                       r.keys.size(), " rows of ", tables[r.table].dim));
    }
  }
  return absl::OkStatus();
}

template <typename Rows>
RowsByShard Route(absl::Span<const Rows> rows, int num_shards) {
  RowsByShard out(num_shards);
  std::vector<int> entry_of(num_shards);
  for (size_t source = 0; source < rows.size(); ++source) {
    std::fill(entry_of.begin(), entry_of.end(), -1);
    const absl::Span<const uint64_t> keys = rows[source].keys;
    for (size_t i = 0; i < keys.size(); ++i) {
      const int s = ShardOfKey(keys[i], num_shards);
      if (entry_of[s] < 0) {
        entry_of[s] = static_cast<int>(out[s].size());
        out[s].push_back(RoutedRows{static_cast<int>(source), rows[source].table, {}, {}});
      }
      RoutedRows& r = out[s][entry_of[s]];
      r.keys.push_back(keys[i]);
      r.at.push_back(static_cast<int32_t>(i));
    }
  }
  return out;
}

}  // namespace

absl::Status CheckRows(absl::Span<const RowsToPull> rows,
                       const std::vector<SparseTableSpec>& tables) {
  return CheckEach<RowsToPull>(rows, tables, [](const RowsToPull& r) { return r.values.size(); });
}

absl::Status CheckRows(absl::Span<const RowsToPush> rows,
                       const std::vector<SparseTableSpec>& tables) {
  return CheckEach<RowsToPush>(rows, tables,
                               [](const RowsToPush& r) { return r.gradients.size(); });
}

RowsByShard RoutePull(absl::Span<const RowsToPull> rows, int num_shards) {
  return Route(rows, num_shards);
}

RowsByShard RoutePush(absl::Span<const RowsToPush> rows, int num_shards) {
  return Route(rows, num_shards);
}

void AddPullRows(const std::vector<RoutedRows>& routed,
                 google::protobuf::RepeatedPtrField<ps::v1::SparseRows>* out) {
  for (const RoutedRows& r : routed) {
    ps::v1::SparseRows* entry = out->Add();
    entry->set_table(r.table);
    *entry->mutable_keys() = {r.keys.begin(), r.keys.end()};
  }
}

void AddPushRows(const std::vector<RoutedRows>& routed, absl::Span<const RowsToPush> rows,
                 const std::vector<SparseTableSpec>& tables,
                 google::protobuf::RepeatedPtrField<ps::v1::SparseRows>* out) {
  for (const RoutedRows& r : routed) {
    const int64_t dim = tables[r.table].dim;
    ps::v1::SparseRows* entry = out->Add();
    entry->set_table(r.table);
    *entry->mutable_keys() = {r.keys.begin(), r.keys.end()};
    std::string* values = entry->mutable_values();
    values->resize(r.keys.size() * dim * sizeof(float));
    const float* from = rows[r.source].gradients.data();
    for (size_t i = 0; i < r.at.size(); ++i) {
      std::memcpy(values->data() + i * dim * sizeof(float), from + r.at[i] * dim,
                  dim * sizeof(float));
    }
  }
}

absl::Status ScatterPulledRows(const std::vector<RoutedRows>& routed,
                               const google::protobuf::RepeatedPtrField<ps::v1::SparseRows>& got,
                               absl::Span<const RowsToPull> rows,
                               const std::vector<SparseTableSpec>& tables) {
  if (got.size() != static_cast<int>(routed.size())) {
    return absl::DataLossError(
        absl::StrCat(got.size(), " row entries answer ", routed.size(), " asked"));
  }
  for (size_t e = 0; e < routed.size(); ++e) {
    const RoutedRows& r = routed[e];
    const ps::v1::SparseRows& entry = got[static_cast<int>(e)];
    const int64_t dim = tables[r.table].dim;
    const size_t bytes = r.keys.size() * dim * sizeof(float);
    if (entry.table() != r.table || entry.keys_size() != static_cast<int>(r.keys.size()) ||
        entry.values().size() != bytes ||
        !std::equal(r.keys.begin(), r.keys.end(), entry.keys().begin())) {
      return absl::DataLossError(absl::StrCat("row entry ", e, " does not answer the keys asked"));
    }
    float* to = rows[r.source].values.data();
    for (size_t i = 0; i < r.at.size(); ++i) {
      std::memcpy(to + r.at[i] * dim, entry.values().data() + i * dim * sizeof(float),
                  dim * sizeof(float));
    }
  }
  return absl::OkStatus();
}

}  // namespace ps
