#ifndef PS_COMMON_DATA_CTR_GENERATOR_H_
#define PS_COMMON_DATA_CTR_GENERATOR_H_

// Synthetic click logs in the Criteo format from a planted model whose true click probability
// of every sample is known, so that a trained model can be judged against the best possible
// (the Bayes-optimal AUC and log-loss of those probabilities), not only against a peer.
//
// The planted model, all of it fixed by the seed:
// - categorical field f (26 of them) has a vocabulary of about 4 * 1.5^f values (4 to ~100 000),
//   drawn with Zipf-like popularity (exponent 1.1: a few values are most of the traffic) and
//   empty with a per-field probability in [0.02, 0.3); each value is an 8-digit hex id;
// - every value (and each field's empty value) has an effect on the logit, normal with standard
//   deviation 0.22, and a latent vector of 4 normals (standard deviation 0.33);
// - 12 fixed pairs of fields interact: the dot product of their values' latent vectors is added;
// - 13 counts, log-normal (some empty), add beta_i * log1p(c) - 0.01 * log1p(c)^2 (beta_i
//   normal with standard deviation 0.09);
// - a bias of -0.75: click rates of 25-30 % and Bayes-optimal AUCs near 0.80 (seeds 1 and 7),
//   close to what is reported for Criteo's logs.
// The label is a Bernoulli draw of sigmoid(logit).

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/random.h"

namespace ps {

class PlantedCtrModel {
 public:
  explicit PlantedCtrModel(uint64_t seed);

  // Draws one sample from `rng`: its line (no newline) and its true click probability; the label
  // in the line is drawn from that probability.
  double Draw(Rng& rng, std::string* line, int32_t* label) const;

  int vocabulary(int field) const { return static_cast<int>(fields_[field].effect.size()) - 1; }

 private:
  static constexpr int kLatent = 4;
  struct Field {
    double empty_probability = 0;
    std::vector<uint32_t> ids;  // the value of each popularity rank
    std::vector<float> effect;  // per rank, then the empty value's (last)
    std::vector<float> latent;  // (vocabulary + 1) * kLatent, the same order
  };
  struct Count {
    double log_mean = 0, log_spread = 0, empty_probability = 0, beta = 0;
  };
  std::vector<Field> fields_;
  std::vector<Count> counts_;
  std::vector<std::pair<int, int>> interacting_;
  double bias_ = 0;
};

// What one written split holds, with the Bayes-optimal quality of its true probabilities.
struct CtrSplitTruth {
  int64_t lines = 0;
  double click_rate = 0;
  double bayes_auc = 0;
  double bayes_logloss = 0;
};

// Writes `lines` samples of the planted model of `seed` to `path` (plain text), drawn from the
// stream of (seed, stream): train and test use different streams of the same model. The lines go
// to `path`.partial, renamed to `path` once all are written: `path` is whole or absent, never cut
// short. A write that fails (DATA_LOSS) or is stopped (CANCELLED: `stop`, when given, became true;
// it is read every few thousand lines) removes the partial file. A process killed outright leaves
// it behind; the next write replaces it.
absl::StatusOr<CtrSplitTruth> WriteCtrSplit(const PlantedCtrModel& model, uint64_t seed,
                                            uint64_t stream, int64_t lines, const std::string& path,
                                            const std::atomic<bool>* stop = nullptr);

}  // namespace ps

#endif  // PS_COMMON_DATA_CTR_GENERATOR_H_
