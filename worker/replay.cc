#include "worker/replay.h"

#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/param_layout.h"
#include "common/base/status_macros.h"
#include "worker/step_gradient.h"

namespace ps {

namespace {

struct Record {
  int64_t version_before;
  int rank;
  int64_t clock;
  int64_t base_version;
};

using StepKey = std::pair<int, int64_t>;  // (rank, clock): one gradient

absl::StatusOr<std::vector<Record>> ReadRecords(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read update record ", path));
  std::vector<Record> out;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    std::istringstream fields(line);
    Record r;
    int64_t staleness;
    if (!(fields >> r.version_before >> r.rank >> r.clock >> r.base_version >> staleness) ||
        r.version_before != static_cast<int64_t>(out.size())) {
      return absl::DataLossError(absl::StrCat(path, ":", line_no, ": malformed or out of order"));
    }
    out.push_back(r);
  }
  return out;
}

struct ShardState {
  KeyRange range;
  std::vector<float> values;
  std::unique_ptr<Optimizer> optimizer;
  int64_t version = 0;
  std::map<int64_t, std::vector<float>> snapshots;  // older versions some gradient still needs
  std::map<int64_t, int> pending_uses;              // version -> gradients yet to be computed
  size_t next = 0;                                  // next record to apply
};

}  // namespace

absl::StatusOr<ReplayResult> Replay(const ReplayOptions& options, Model& model, Device& device,
                                    const Dataset& train) {
  const int shards = static_cast<int>(options.record_paths.size());
  if (shards < 1) return absl::InvalidArgumentError("no update records given");
  RETURN_IF_ERROR(ValidateOptimizerOptions(options.optimizer));
  const int64_t n = model.layout().total();
  std::vector<float> initial(n);
  model.InitParams(options.seed, initial.data());

  std::vector<std::vector<Record>> records(shards);
  for (int s = 0; s < shards; ++s) {
    ASSIGN_OR_RETURN(records[s], ReadRecords(options.record_paths[s]));
  }
  // The base version of every gradient on every shard.
  std::map<StepKey, std::vector<int64_t>> bases;
  for (int s = 0; s < shards; ++s) {
    for (const Record& r : records[s]) {
      auto& b = bases[{r.rank, r.clock}];
      b.resize(shards, -1);
      b[s] = r.base_version;
    }
  }
  std::vector<ShardState> state(shards);
  for (int s = 0; s < shards; ++s) {
    ShardState& st = state[s];
    st.range = ShardRange(n, shards, s);
    st.values.assign(initial.begin() + st.range.begin, initial.begin() + st.range.end);
    st.optimizer = std::make_unique<Optimizer>(options.optimizer, st.range.size());
  }
  for (const auto& [key, b] : bases) {
    for (int s = 0; s < shards; ++s) {
      if (b[s] < 0) {
        return absl::DataLossError(absl::StrCat("gradient of worker ", key.first, " clock ",
                                                key.second, " is missing from shard ", s,
                                                "'s record (only the plain rule can be replayed)"));
      }
      ++state[s].pending_uses[b[s]];
    }
  }

  std::vector<std::unique_ptr<StepGradient>> steps(options.num_workers);
  for (int r = 0; r < options.num_workers; ++r) {
    BatchPlanOptions plan;
    plan.dataset_size = train.size();
    plan.num_workers = options.num_workers;
    plan.rank = r;
    plan.batch_size = options.batch_size;
    plan.accumulate = options.accumulate;
    plan.seed = options.seed;
    ASSIGN_OR_RETURN(steps[r], StepGradient::Create(model, device, train, plan));
  }

  // Gradients computed and not yet applied by every shard: (gradient, shards still to apply it).
  std::map<StepKey, std::pair<std::vector<float>, int>> ready;
  std::vector<float> weights(n);
  ReplayResult result;
  for (;;) {
    bool progress = false;
    bool done = true;
    for (int s = 0; s < shards; ++s) {
      ShardState& st = state[s];
      while (st.next < records[s].size()) {
        done = false;
        const Record& rec = records[s][st.next];
        const StepKey key{rec.rank, rec.clock};
        auto it = ready.find(key);
        if (it == ready.end()) {
          // The worker read shard t at version bases[key][t]: all of them must be reachable.
          const std::vector<int64_t>& b = bases[key];
          bool available = true;
          for (int t = 0; t < shards && available; ++t) {
            available = b[t] == state[t].version || state[t].snapshots.count(b[t]) > 0;
          }
          if (!available) break;
          for (int t = 0; t < shards; ++t) {
            const std::vector<float>& src =
                b[t] == state[t].version ? state[t].values : state[t].snapshots[b[t]];
            std::copy(src.begin(), src.end(), weights.begin() + state[t].range.begin);
            if (--state[t].pending_uses[b[t]] == 0) {
              state[t].pending_uses.erase(b[t]);
              state[t].snapshots.erase(b[t]);
            }
          }
          if (rec.rank < 0 || rec.rank >= options.num_workers) {
            return absl::DataLossError(absl::StrCat("record names worker ", rec.rank));
          }
          std::vector<float> grad(n);
          RETURN_IF_ERROR(
              steps[rec.rank]->Compute(rec.clock, weights, absl::MakeSpan(grad)).status());
          ++result.gradients;
          it = ready.emplace(key, std::make_pair(std::move(grad), shards)).first;
        }
        const std::vector<float>& grad = it->second.first;
        // Leaving this version: keep it if a gradient still to be computed was based on it.
        if (st.pending_uses.count(st.version) > 0 && st.snapshots.count(st.version) == 0) {
          st.snapshots[st.version] = st.values;
        }
        st.optimizer->Apply(st.version,
                            absl::MakeConstSpan(grad.data() + st.range.begin, st.range.size()),
                            absl::MakeSpan(st.values));
        ++st.version;
        ++st.next;
        ++result.updates;
        if (--it->second.second == 0) ready.erase(it);
        progress = true;
      }
    }
    if (done) break;
    if (!progress) {
      return absl::DataLossError("the update records are inconsistent: no shard can go on");
    }
  }
  result.weights.resize(n);
  for (int s = 0; s < shards; ++s) {
    std::copy(state[s].values.begin(), state[s].values.end(),
              result.weights.begin() + state[s].range.begin);
  }
  return result;
}

}  // namespace ps
