#include "common/metrics/classification.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace ps {

double RocAuc(const std::vector<float>& scores, const std::vector<int32_t>& labels) {
  const size_t n = scores.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Sum of the positives' ranks (1-based, tied scores sharing their average rank).
  double positive_rank_sum = 0;
  int64_t positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double average_rank = 0.5 * static_cast<double>(i + 1 + j);
    for (size_t t = i; t < j; ++t) {
      if (labels[order[t]] != 0) {
        positive_rank_sum += average_rank;
        ++positives;
      }
    }
    i = j;
  }
  const int64_t negatives = static_cast<int64_t>(n) - positives;
  if (positives == 0 || negatives == 0) return std::numeric_limits<double>::quiet_NaN();
  const double p = static_cast<double>(positives);
  return (positive_rank_sum - p * (p + 1) / 2) / (p * static_cast<double>(negatives));
}

double LogLoss(const std::vector<float>& probabilities, const std::vector<int32_t>& labels) {
  if (probabilities.empty()) return 0;
  constexpr double kEps = 1e-7;
  double sum = 0;
  for (size_t i = 0; i < probabilities.size(); ++i) {
    const double p = std::clamp(static_cast<double>(probabilities[i]), kEps, 1 - kEps);
    sum -= labels[i] != 0 ? std::log(p) : std::log1p(-p);
  }
  return sum / static_cast<double>(probabilities.size());
}

}  // namespace ps
