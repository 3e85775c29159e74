// ps_replay: re-runs a recorded SSP/ASP run on one machine, in the exact order the shards applied
// its gradients, and writes the final weights. Give it the shards' update records and the run's
// training and optimizer flags (ps_launch --record_updates writes the full command to
// <metrics_dir>/replay.cmd).

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cli.h"
#include "common/cpu_device.h"
#include "common/dataset.h"
#include "common/model.h"
#include "common/optimizer_flags.h"
#include "worker/replay.h"

ABSL_FLAG(std::string, records, "", "Comma-separated update records of shard 0, 1, ... in order.");
ABSL_FLAG(int32_t, num_workers, 1, "Workers of the recorded run.");
ABSL_FLAG(std::string, model, "mlp", "Model: mlp or cnn.");
ABSL_FLAG(std::string, hidden, "", "Hidden fully connected widths, as in the run.");
ABSL_FLAG(int32_t, batch_size, 32, "Per-worker micro-batch of the run.");
ABSL_FLAG(int32_t, accumulate, 1, "Micro-batches per push in the run.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the run.");
ABSL_FLAG(std::string, data_dir, ps::kDefaultFashionMnistDir, "Fashion-MNIST folder.");
ABSL_FLAG(int64_t, train_limit, 0, "The run's --train_limit.");
ABSL_FLAG(std::string, weights_out, "", "Write the final weights as raw float32 here.");

int main(int argc, char** argv) {
  const std::vector<std::string> rest = ps::ParseCommandLine(
      argc, argv,
      "Replays a recorded SSP/ASP run bit for bit.\n"
      "  ps_replay --records r0,r1 --num_workers 4 --optimizer adam --lr 0.001 ... "
      "--weights_out w.f32");
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "ps_replay: %s\n", s.ToString().c_str());
    return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  };
  if (!rest.empty()) return fail(absl::InvalidArgumentError("unexpected argument " + rest[0]));
  ps::ReplayOptions options;
  options.record_paths = absl::StrSplit(absl::GetFlag(FLAGS_records), ',', absl::SkipEmpty());
  options.num_workers = absl::GetFlag(FLAGS_num_workers);
  options.batch_size = absl::GetFlag(FLAGS_batch_size);
  options.accumulate = absl::GetFlag(FLAGS_accumulate);
  options.seed = absl::GetFlag(FLAGS_seed);
  auto optimizer = ps::OptimizerOptionsFromFlags();
  if (!optimizer.ok()) return fail(optimizer.status());
  options.optimizer = *optimizer;
  ps::ModelSpec spec;
  spec.name = absl::GetFlag(FLAGS_model);
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_hidden), ',', absl::SkipEmpty())) {
    int64_t width = 0;
    if (!absl::SimpleAtoi(part, &width) || width <= 0) {
      return fail(absl::InvalidArgumentError(absl::StrCat("--hidden: bad width '", part, "'")));
    }
    spec.hidden.push_back(width);
  }
  auto train = ps::LoadFashionMnist(absl::GetFlag(FLAGS_data_dir), "train");
  if (!train.ok()) return fail(train.status());
  train->Truncate(absl::GetFlag(FLAGS_train_limit));
  // The same device and BLAS settings as the workers: results are bit-identical only then.
  ps::CpuDevice device;
  auto model = ps::MakeModel(spec, ps::ImageShape{train->rows, train->cols, 1}, train->num_classes,
                             device, options.batch_size);
  if (!model.ok()) return fail(model.status());
  auto result = ps::Replay(options, **model, device, *train);
  if (!result.ok()) return fail(result.status());
  const std::string out = absl::GetFlag(FLAGS_weights_out);
  if (!out.empty()) {
    std::FILE* f = std::fopen(out.c_str(), "wb");
    if (f == nullptr) return fail(absl::PermissionDeniedError("cannot write " + out));
    const size_t bytes = result->weights.size() * sizeof(float);
    const bool ok = std::fwrite(result->weights.data(), 1, bytes, f) == bytes;
    if (std::fclose(f) != 0 || !ok) return fail(absl::DataLossError("short write to " + out));
  }
  std::printf("replayed %lld updates of %lld gradients\n", static_cast<long long>(result->updates),
              static_cast<long long>(result->gradients));
  return 0;
}
