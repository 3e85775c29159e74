#ifndef PS_SERVER_STALENESS_HISTOGRAM_H_
#define PS_SERVER_STALENESS_HISTOGRAM_H_

// Counts of applied gradients by staleness (the shard's version at apply minus the version the
// gradient was computed from), with the exact maximum and mean.

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ps {

class StalenessHistogram {
 public:
  // Staleness values >= kBuckets - 1 share the last bucket; max() stays exact.
  static constexpr int kBuckets = 64;

  void Record(int64_t staleness) {
    if (counts_.empty()) counts_.assign(kBuckets, 0);
    ++counts_[std::min<int64_t>(staleness, kBuckets - 1)];
    ++count_;
    sum_ += staleness;
    max_ = std::max(max_, staleness);
  }
  void Merge(const StalenessHistogram& other) {
    if (other.count_ == 0) return;
    if (counts_.empty()) counts_.assign(kBuckets, 0);
    for (int i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
    count_ += other.count_;
    sum_ += other.sum_;
    max_ = std::max(max_, other.max_);
  }

  int64_t count() const { return count_; }
  int64_t max() const { return max_; }
  double mean() const { return count_ == 0 ? 0.0 : static_cast<double>(sum_) / count_; }
  int64_t sum() const { return sum_; }
  // The whole state, for checkpoints: Restore(Counts..., count, sum, max) gives an equal object.
  const std::vector<int64_t>& counts() const { return counts_; }
  // False when the parts are inconsistent (wrong bucket count, negative values).
  bool Restore(std::vector<int64_t> counts, int64_t count, int64_t sum, int64_t max) {
    if (!(counts.empty() || counts.size() == static_cast<size_t>(kBuckets)) || count < 0 ||
        sum < 0 || max < 0) {
      return false;
    }
    for (int64_t c : counts) {
      if (c < 0) return false;
    }
    counts_ = std::move(counts);
    count_ = count;
    sum_ = sum;
    max_ = max;
    return true;
  }
  // Counts up to the largest non-empty bucket (empty when nothing was recorded).
  std::vector<int64_t> TrimmedCounts() const {
    size_t n = counts_.size();
    while (n > 0 && counts_[n - 1] == 0) --n;
    return std::vector<int64_t>(counts_.begin(), counts_.begin() + n);
  }

 private:
  std::vector<int64_t> counts_;
  int64_t count_ = 0;
  int64_t sum_ = 0;
  int64_t max_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_STALENESS_HISTOGRAM_H_
