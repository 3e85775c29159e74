// ps_datagen: writes synthetic training data with a known best possible result.
//   ps_datagen ctr --out DIR --train N --test N --seed S
// writes DIR/train.tsv and DIR/test.tsv in the Criteo format from a planted click model
// (common/data/ctr_generator.h) and DIR/truth.json with, per split, the lines, the click rate and
// the Bayes-optimal AUC and log-loss of the true probabilities. Each file appears only once whole
// (written as FILE.partial, then renamed), truth.json last: a run that fails or is stopped by
// SIGINT or SIGTERM midway removes the file it was writing and leaves no file cut short that a
// later reader would take for data; stopped, it exits 128 + the signal's number.

#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/base/shutdown_signal.h"
#include "common/base/whole_file.h"
#include "common/cli/cli.h"
#include "common/data/ctr_generator.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, out, "", "Folder to write (created when missing).");
ABSL_FLAG(int64_t, train, 1000000, "Training lines.");
ABSL_FLAG(int64_t, test, 100000, "Test lines.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the planted model and of the draws.");

namespace {

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "ps_datagen: %s\n", message.c_str());
  return code;
}

nlohmann::json ToJson(const ps::CtrSplitTruth& t) {
  return {{"lines", t.lines},
          {"click_rate", t.click_rate},
          {"bayes_auc", t.bayes_auc},
          {"bayes_logloss", t.bayes_logloss}};
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args = ps::ParseCommandLine(
      argc, argv,
      "Writes synthetic data with a known best possible result.\n"
      "  ps_datagen ctr --out DIR [--train 1000000] [--test 100000] [--seed 1]");
  if (args.size() != 1 || args[0] != "ctr")
    return Fail("usage: ps_datagen ctr --out DIR ...", ps::kExitConfigurationError);
  const std::string dir = absl::GetFlag(FLAGS_out);
  if (dir.empty()) return Fail("--out is required", ps::kExitConfigurationError);
  if (absl::GetFlag(FLAGS_train) < 1 || absl::GetFlag(FLAGS_test) < 1) {
    return Fail("--train and --test must be >= 1", ps::kExitConfigurationError);
  }
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return Fail(absl::StrCat("cannot create ", dir, ": ", error.message()),
                ps::kExitConfigurationError);
  }
  std::atomic<bool> stop{false};
  std::atomic<int> stop_signal{0};
  ps::ShutdownSignalWatcher signals([&](int signo) {
    stop_signal = signo;
    stop = true;
  });
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const ps::PlantedCtrModel model(seed);
  nlohmann::json truth = {{"seed", seed}, {"format", "criteo"}};
  for (const auto& [split, stream, lines] : {std::tuple{"train", 0, absl::GetFlag(FLAGS_train)},
                                             std::tuple{"test", 1, absl::GetFlag(FLAGS_test)}}) {
    const std::string path = absl::StrCat(dir, "/", split, ".tsv");
    absl::StatusOr<ps::CtrSplitTruth> written =
        ps::WriteCtrSplit(model, seed, stream, lines, path, &stop);
    if (absl::IsCancelled(written.status())) {
      const int signo = stop_signal.load();
      return Fail(absl::StrCat(path, " not written: ", written.status().message(), " by ",
                               signo == SIGINT ? "SIGINT" : "SIGTERM"),
                  128 + signo);
    }
    if (!written.ok()) return Fail(written.status().ToString(), ps::ExitCodeOf(written.status()));
    truth[split] = ToJson(*written);
    std::printf("%s: %lld lines, click rate %.4f, Bayes-optimal AUC %.4f, log-loss %.4f\n", split,
                static_cast<long long>(written->lines), written->click_rate, written->bayes_auc,
                written->bayes_logloss);
  }
  // Written last and whole (renamed into place): its presence says both splits are complete.
  const absl::Status written = ps::WriteWholeFile(dir + "/truth.json", truth.dump(2) + "\n");
  if (!written.ok()) return Fail(written.ToString(), ps::ExitCodeOf(written));
  return 0;
}
