#ifndef PS_COMMON_METRICS_CLASSIFICATION_H_
#define PS_COMMON_METRICS_CLASSIFICATION_H_

// Quality of a binary classifier's probabilities over a labelled set: the area under the ROC
// curve and the mean log-loss. Used by the evaluations of click-through models and by ps_datagen
// for the Bayes-optimal bounds of its planted model.

#include <cstdint>
#include <vector>

namespace ps {

// The probability that a random positive scores above a random negative, ties counting one half
// (the Mann-Whitney statistic); NaN when the labels are all 0 or all 1. `labels` are 0 or 1.
double RocAuc(const std::vector<float>& scores, const std::vector<int32_t>& labels);

// Mean of -log p(label) in nats with p(1) = probabilities[i], clipped to [1e-7, 1 - 1e-7] so that
// one confident mistake is large but finite (as scikit-learn's log_loss). 0 for an empty set.
double LogLoss(const std::vector<float>& probabilities, const std::vector<int32_t>& labels);

}  // namespace ps

#endif  // PS_COMMON_METRICS_CLASSIFICATION_H_
