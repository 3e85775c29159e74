#include "common/data/ctr_generator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/data/ctr_dataset.h"
#include "common/metrics/classification.h"

namespace ps {

namespace {

constexpr double kZipfExponent = 1.1;
constexpr double kEffectStddev = 0.22;
constexpr double kLatentStddev = 0.33;
constexpr int kInteractingPairs = 12;
constexpr double kCountCurvature = 0.01;
constexpr double kBias = -0.75;

// Uniform in (0, 1), never 0 (a log follows).
double Uniform(Rng& rng) { return UniformOpen(rng); }

double Normal(Rng& rng) { return StandardNormal(rng); }

double Sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

}  // namespace

PlantedCtrModel::PlantedCtrModel(uint64_t seed) {
  Rng rng = Rng::FromKeys({seed, 0x706c616e74});  // "plant"
  fields_.resize(kCtrCategoricalFields);
  for (int f = 0; f < kCtrCategoricalFields; ++f) {
    Field& field = fields_[f];
    const int vocabulary = static_cast<int>(4 * std::pow(1.5, f));
    field.empty_probability = 0.02 + 0.28 * Uniform(rng);
    field.ids.resize(vocabulary);
    for (uint32_t& id : field.ids) id = static_cast<uint32_t>(rng.NextU64());
    field.effect.resize(vocabulary + 1);
    for (float& e : field.effect) e = static_cast<float>(kEffectStddev * Normal(rng));
    field.latent.resize(static_cast<size_t>(vocabulary + 1) * kLatent);
    for (float& l : field.latent) l = static_cast<float>(kLatentStddev * Normal(rng));
  }
  counts_.resize(kCtrDenseFields);
  for (Count& c : counts_) {
    c.log_mean = 3.0 * Uniform(rng);
    c.log_spread = 0.5 + Uniform(rng);
    c.empty_probability = Uniform(rng) < 0.5 ? 0.0 : 0.4 * Uniform(rng);
    c.beta = 0.09 * Normal(rng);
  }
  while (static_cast<int>(interacting_.size()) < kInteractingPairs) {
    const int a = static_cast<int>(rng.Below(kCtrCategoricalFields));
    const int b = static_cast<int>(rng.Below(kCtrCategoricalFields));
    const std::pair<int, int> pair(std::min(a, b), std::max(a, b));
    if (a != b && std::find(interacting_.begin(), interacting_.end(), pair) == interacting_.end()) {
      interacting_.push_back(pair);
    }
  }
  bias_ = kBias;
}

double PlantedCtrModel::Draw(Rng& rng, std::string* line, int32_t* label) const {
  double logit = bias_;
  std::string counts, values;
  for (const Count& c : counts_) {
    if (Uniform(rng) < c.empty_probability) {
      counts += '\t';
      continue;
    }
    const int64_t count =
        static_cast<int64_t>(std::floor(std::exp(c.log_mean + c.log_spread * Normal(rng)))) - 1;
    const double x = std::log1p(static_cast<double>(std::max<int64_t>(count, 0)));
    logit += c.beta * x - kCountCurvature * x * x;
    absl::StrAppend(&counts, "\t", count);
  }
  int rank[kCtrCategoricalFields];
  for (int f = 0; f < kCtrCategoricalFields; ++f) {
    const Field& field = fields_[f];
    const bool empty = Uniform(rng) < field.empty_probability;
    const int vocabulary = static_cast<int>(field.ids.size());
    rank[f] = empty ? vocabulary : static_cast<int>(ZipfRank(rng, vocabulary, kZipfExponent));
    logit += field.effect[rank[f]];
    values += '\t';
    if (!empty) absl::StrAppendFormat(&values, "%08x", field.ids[rank[f]]);
  }
  for (const auto& [a, b] : interacting_) {
    const float* u = &fields_[a].latent[static_cast<size_t>(rank[a]) * kLatent];
    const float* v = &fields_[b].latent[static_cast<size_t>(rank[b]) * kLatent];
    for (int k = 0; k < kLatent; ++k) logit += static_cast<double>(u[k]) * v[k];
  }
  const double p = Sigmoid(logit);
  *label = Uniform(rng) < p ? 1 : 0;
  *line = absl::StrCat(*label, counts, values);
  return p;
}

absl::StatusOr<CtrSplitTruth> WriteCtrSplit(const PlantedCtrModel& model, uint64_t seed,
                                            uint64_t stream, int64_t lines, const std::string& path,
                                            const std::atomic<bool>* stop) {
  if (lines < 1) return absl::InvalidArgumentError("a split needs at least one line");
  const std::string partial = path + ".partial";
  std::FILE* out = std::fopen(partial.c_str(), "wb");
  if (out == nullptr) return absl::PermissionDeniedError(absl::StrCat("cannot write ", partial));
  Rng rng = Rng::FromKeys({seed, 0x64726177, stream});  // "draw"
  std::vector<float> probabilities(lines);
  std::vector<int32_t> labels(lines);
  // Every line, then the close and the rename; whatever fails or stops takes the partial file
  // with it.
  const absl::Status written = [&]() -> absl::Status {
    constexpr int64_t kLinesPerStopCheck = 4096;
    std::string line;
    for (int64_t i = 0; i < lines; ++i) {
      if (stop != nullptr && i % kLinesPerStopCheck == 0 && stop->load()) {
        return absl::CancelledError(absl::StrCat("stopped after ", i, " of ", lines, " lines"));
      }
      probabilities[i] = static_cast<float>(model.Draw(rng, &line, &labels[i]));
      line += '\n';
      if (std::fwrite(line.data(), 1, line.size(), out) != line.size()) {
        return absl::DataLossError(absl::StrCat("short write to ", partial));
      }
    }
    const int closed = std::fclose(std::exchange(out, nullptr));
    if (closed != 0) return absl::DataLossError(absl::StrCat("cannot finish ", partial));
    if (std::rename(partial.c_str(), path.c_str()) != 0) {
      return absl::DataLossError(absl::StrCat("cannot rename ", partial, " to ", path));
    }
    return absl::OkStatus();
  }();
  if (!written.ok()) {
    if (out != nullptr) std::fclose(out);
    std::remove(partial.c_str());
    return written;
  }
  int64_t clicks = 0;
  for (int32_t label : labels) clicks += label;
  CtrSplitTruth truth;
  truth.lines = lines;
  truth.click_rate = static_cast<double>(clicks) / static_cast<double>(lines);
  truth.bayes_auc = RocAuc(probabilities, labels);
  truth.bayes_logloss = LogLoss(probabilities, labels);
  return truth;
}

}  // namespace ps
