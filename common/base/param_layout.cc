#include "common/base/param_layout.h"

#include <cassert>
#include <set>

#include "absl/strings/str_cat.h"

namespace ps {

int64_t TensorSpec::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ULL;
constexpr uint64_t kFnvPrime = 1099511628211ULL;

uint64_t FnvMix(uint64_t h, const void* data, size_t n) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= bytes[i];
    h *= kFnvPrime;
  }
  return h;
}

}  // namespace

absl::StatusOr<ParamLayout> ParamLayout::Create(std::vector<TensorSpec> tensors) {
  if (tensors.empty()) return absl::InvalidArgumentError("a layout needs at least one tensor");
  std::set<std::string> names;
  ParamLayout layout;
  uint64_t h = kFnvOffset;
  for (const TensorSpec& t : tensors) {
    if (t.name.empty()) return absl::InvalidArgumentError("tensor with an empty name");
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate tensor name '", t.name, "'"));
    }
    if (t.shape.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' has no shape"));
    }
    for (int64_t d : t.shape) {
      if (d <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", t.name, "' has non-positive dimension ", d));
      }
    }
    layout.offsets_.push_back(layout.total_);
    layout.total_ += t.NumElements();
    // The name's length is mixed in so that ("ab","c") and ("a","bc") differ.
    const uint64_t name_len = t.name.size();
    h = FnvMix(h, &name_len, sizeof(name_len));
    h = FnvMix(h, t.name.data(), t.name.size());
    const uint64_t rank = t.shape.size();
    h = FnvMix(h, &rank, sizeof(rank));
    for (int64_t d : t.shape) h = FnvMix(h, &d, sizeof(d));
  }
  layout.tensors_ = std::move(tensors);
  layout.fingerprint_ = h;
  return layout;
}

absl::StatusOr<ParamDescription> ParamDescription::Create(ParamLayout dense,
                                                          std::vector<SparseTableSpec> sparse) {
  std::set<std::string> names;
  for (const TensorSpec& t : dense.tensors()) names.insert(t.name);
  uint64_t h = dense.fingerprint();
  for (const SparseTableSpec& t : sparse) {
    if (t.name.empty()) return absl::InvalidArgumentError("sparse table with an empty name");
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate parameter name '", t.name, "'"));
    }
    if (t.dim <= 0 || !(t.init_scale > 0.0f)) {
      return absl::InvalidArgumentError(absl::StrCat("sparse table '", t.name, "' has dimension ",
                                                     t.dim, " and scale ", t.init_scale));
    }
    const uint64_t name_len = t.name.size();
    h = FnvMix(h, &name_len, sizeof(name_len));
    h = FnvMix(h, t.name.data(), t.name.size());
    h = FnvMix(h, &t.dim, sizeof(t.dim));
    h = FnvMix(h, &t.init_scale, sizeof(t.init_scale));
  }
  return ParamDescription(std::move(dense), std::move(sparse), h);
}

KeyRange ShardRange(int64_t total, int num_shards, int shard) {
  assert(num_shards > 0 && shard >= 0 && shard < num_shards && total >= 0);
  const int64_t base = total / num_shards;
  const int64_t extra = total % num_shards;
  KeyRange r;
  r.begin = shard * base + std::min<int64_t>(shard, extra);
  r.end = r.begin + base + (shard < extra ? 1 : 0);
  return r;
}

}  // namespace ps
