// ps_replay: re-runs a recorded SSP/ASP run on one machine, in the exact order the shards applied
// its gradients, and writes the final weights. Give it the shards' update records and the run's
// training and optimizer flags (ps_launch --replayable writes the full command to
// <metrics_dir>/replay.cmd).

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/whole_file.h"
#include "common/cli/cli.h"
#include "common/cli/client_flags.h"
#include "common/cli/cluster_flags.h"
#include "common/cli/optimizer_flags.h"
#include "common/cli/workload_flags.h"
#include "common/data/dataset.h"
#include "common/device/cpu_device.h"
#include "common/nn/model.h"
#include "worker/replay.h"

ABSL_FLAG(std::string, records, "", "Comma-separated update records of shard 0, 1, ... in order.");

int main(int argc, char** argv) {
  ps::ParseFlags(argc, argv,
                 "Replays a recorded SSP/ASP run bit for bit.\n"
                 "  ps_replay --records r0,r1 --num_workers 4 --optimizer adam --lr 0.001 ... "
                 "--weights_out w.f32");
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "ps_replay: %s\n", s.ToString().c_str());
    return ps::ExitCodeOf(s);
  };
  ps::ReplayOptions options;
  options.record_paths = absl::StrSplit(absl::GetFlag(FLAGS_records), ',', absl::SkipEmpty());
  options.num_workers = absl::GetFlag(FLAGS_num_workers);
  auto workload = ps::WorkloadFromFlags();
  if (!workload.ok()) return fail(workload.status());
  options.batch_size = workload->batch_size;
  options.accumulate = workload->accumulate;
  options.seed = workload->seed;
  auto optimizer = ps::OptimizerOptionsFromFlags();
  if (!optimizer.ok()) return fail(optimizer.status());
  options.optimizer = *optimizer;
  auto train = ps::OpenWorkloadData(*workload, ps::Split::kTrain);
  if (!train.ok()) return fail(train.status());
  // The same device and BLAS settings as the workers: results are bit-identical only then.
  ps::CpuDevice device;
  auto model = ps::MakeModel(workload->model, (*train)->shape(), device, options.batch_size);
  if (!model.ok()) return fail(model.status());
  auto result = ps::Replay(options, **model, device, **train);
  if (!result.ok()) return fail(result.status());
  const std::string out = absl::GetFlag(FLAGS_weights_out);
  if (!out.empty()) {
    const absl::Status written = ps::WriteWholeFile(out, result->weights);
    if (!written.ok()) return fail(written);
  }
  std::printf("replayed %lld updates of %lld gradients\n", static_cast<long long>(result->updates),
              static_cast<long long>(result->gradients));
  return 0;
}
