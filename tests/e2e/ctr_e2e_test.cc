// End-to-end on click logs: ps_datagen writes planted Criteo-format data, ps_launch trains DLRM
// with its embedding table on the shards under BSP and ASP, and malformed data is refused naming
// the line (or skipped and counted on request).

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/e2e_util.h"

namespace ps::e2e {
namespace {

// Planted click data (30 000 training and 5 000 test lines), written once.
const std::string& ClickData() {
  static const std::string dir = [] {
    const std::string d = RunDir("ctr_data");
    EXPECT_EQ(RunTool({BinDir() + "/ps_datagen", "ctr", "--out=" + d, "--train=30000",
                       "--test=5000", "--seed=4"},
                      d + "/datagen.log"),
              0)
        << ReadAll(d + "/datagen.log");
    return d;
  }();
  return dir;
}

nlohmann::json Summary(const std::string& dir) {
  return nlohmann::json::parse(ReadAll(dir + "/summary.json"));
}

std::vector<std::string> Dlrm(const std::string& data) {
  return {"--data=criteo:" + data, "--model=dlrm", "--shards=2", "--epochs=1", "--batch_size=128"};
}

// BSP, ASP, and ASP with the pipeline (the rows pulled a step ahead and pushed while the next
// step computes), its payloads in the gRPC messages.
TEST(CtrE2e, DlrmLearnsThePlantedClicksUnderBspAspAndThePipeline) {
  const nlohmann::json truth = nlohmann::json::parse(ReadAll(ClickData() + "/truth.json"));
  const double bayes_auc = truth["test"]["bayes_auc"];
  struct Run {
    std::string mode;
    int workers;
    std::vector<std::string> flags;
  };
  for (const Run& run : {Run{"bsp", 2, {}}, Run{"asp", 3, {}},
                         Run{"asp", 2, {"--overlap", "--async_push", "--shared_memory=false"}}}) {
    const std::string mode = absl::StrCat(run.mode, run.flags.empty() ? "" : "_pipeline");
    const std::string dir = RunDir(absl::StrCat("dlrm_", mode));
    std::vector<std::string> flags = {absl::StrCat("--mode=", run.mode),
                                      absl::StrCat("--workers=", run.workers)};
    flags.insert(flags.end(), run.flags.begin(), run.flags.end());
    ASSERT_EQ(RunLaunch(dir, With(Dlrm(ClickData()), flags)), 0);
    const nlohmann::json s = Summary(dir);
    const double auc = s["test_auc"];
    std::printf("%s, %d workers: test AUC %.4f, log-loss %.4f (Bayes-optimal AUC %.4f)\n",
                mode.c_str(), run.workers, auc, s["test_logloss"].get<double>(), bayes_auc);
    EXPECT_GT(auc, 0.62) << mode;
    EXPECT_LT(auc, bayes_auc + 0.02) << mode;  // nothing beats the true probabilities
    EXPECT_EQ(s["samples_skipped"], 0) << mode;
    EXPECT_EQ(s["gradients_applied"], s["gradients_expected"]) << mode;
    // The tables' metrics: every row created is held (no capacity), and a step's distinct keys
    // lie between one field's worth and the whole batch's 26 per line.
    const std::vector<int64_t> rows = s["rows_per_shard"], bytes = s["bytes_per_shard"];
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0] + rows[1], s["row_admissions"].get<int64_t>()) << mode;
    EXPECT_EQ(s["row_evictions"], 0) << mode;
    EXPECT_GT(bytes[0], rows[0] * 16 * 4) << mode;
    EXPECT_GT(s["unique_keys_per_step"].get<double>(), 26.0) << mode;
    EXPECT_LT(s["unique_keys_per_step"].get<double>(), 26.0 * 128) << mode;
    EXPECT_GT(s["sparse_pull_ms"].get<double>(), 0.0) << mode;
    EXPECT_GT(s["sparse_push_ms"].get<double>(), 0.0) << mode;
    if (!run.flags.empty()) {
      const std::vector<std::string> starts = LinesOfKind(dir + "/worker-0.jsonl", "start");
      ASSERT_EQ(starts.size(), 1u);
      EXPECT_TRUE(absl::StrContains(starts[0], "\"schedule\":\"pipelined\"")) << starts[0];
      EXPECT_EQ(s["shared_memory_payloads"], 0);
    }
    EXPECT_TRUE(ProcessesMentioning(dir).empty());
  }
}

// A table capped below the data's distinct keys, with admission: the shards hold at most the
// capacity, evict and refuse rows as counted, and the model still learns.
TEST(CtrE2e, ACappedTableWithAdmissionEvictsAndStillLearns) {
  const std::string dir = RunDir("dlrm_capped");
  ASSERT_EQ(RunLaunch(dir, With(Dlrm(ClickData()), {"--mode=bsp", "--workers=2",
                                                    "--table_capacity=5000", "--admit_after=2"})),
            0);
  const nlohmann::json s = Summary(dir);
  const std::vector<int64_t> rows = s["rows_per_shard"];
  for (int64_t r : rows) EXPECT_EQ(r, 5000);
  EXPECT_GT(s["row_evictions"].get<int64_t>(), 0);
  EXPECT_GT(s["row_gradients_not_admitted"].get<int64_t>(), 0);
  EXPECT_EQ(s["row_admissions"].get<int64_t>() - s["row_evictions"].get<int64_t>(),
            rows[0] + rows[1]);
  std::printf("capped: test AUC %.4f, %lld evictions, %lld row gradients not admitted\n",
              s["test_auc"].get<double>(), static_cast<long long>(s["row_evictions"]),
              static_cast<long long>(s["row_gradients_not_admitted"]));
  EXPECT_GT(s["test_auc"].get<double>(), 0.6);
}

// Shard 1 killed with SIGKILL mid-run, checkpoints on: it restores its slice and its rows, the
// workers redo what it lost, every gradient is applied, and the result is the undisturbed run's.
// The BSP job of the shard-kill tests: 2 workers, 3 epochs.
std::vector<std::string> ShardKillJob() {
  return With(Dlrm(ClickData()), {"--mode=bsp", "--workers=2", "--epochs=3"});
}

TEST(CtrE2e, AShardKilledMidRunRestoresItsRowsAndTheJobEndsAsUndisturbed) {
  const std::string calm = RunDir("dlrm_calm");
  ASSERT_EQ(RunLaunch(calm, ShardKillJob()), 0);
  const std::string dir = RunDir("dlrm_shard_kill");
  ASSERT_EQ(RunWithShardKilled(dir, 5, 120, ShardKillJob()), 0) << ReadAll(dir + "/launch.log");
  const nlohmann::json s = Summary(dir);
  EXPECT_EQ(s["shard_restarts"], 1);
  // Checkpoints every 5 updates, a full one every 10th (--full_checkpoint_every): the folder
  // holds the newest 3 (--checkpoint_keep), at least one of them incremental (smaller), and,
  // when none of them is full, also the full one they build on (the largest, and the oldest).
  std::vector<std::pair<std::string, uintmax_t>> files;
  for (const auto& f : std::filesystem::directory_iterator(dir + "/checkpoints/ps-1")) {
    files.emplace_back(f.path().filename().string(), std::filesystem::file_size(f.path()));
  }
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 3u);
  ASSERT_LE(files.size(), 4u);
  uintmax_t smallest = files[0].second, largest = files[0].second;
  for (const auto& [name, size] : files) {
    smallest = std::min(smallest, size);
    largest = std::max(largest, size);
  }
  EXPECT_LT(smallest, largest);
  if (files.size() == 4) {
    EXPECT_EQ(files[0].second, largest);
  }
  EXPECT_EQ(s["samples_skipped"], 0);
  EXPECT_EQ(s["gradients_applied"], s["gradients_expected"]);
  // The redone steps computed their gradients against shard 0's newer weights (it cannot serve
  // the old ones), so the result is near the undisturbed run's, not equal to it. Measured: the
  // AUC drifts about 0.0001 per redone round (0.0016 at 19, 0.0024 at 34), and how many are
  // redone depends on how far the checkpoint on disk lags the shard (25 on a busy CI machine).
  const double undisturbed = Summary(calm)["test_auc"];
  const int64_t duplicates = s["pushes_duplicate"];  // mostly shard 0's, one per redone step
  std::printf("shard killed: test AUC %.4f (undisturbed %.4f), %lld duplicate pushes\n",
              s["test_auc"].get<double>(), undisturbed, static_cast<long long>(duplicates));
  EXPECT_NEAR(s["test_auc"].get<double>(), undisturbed, 0.005) << duplicates;
  EXPECT_TRUE(ProcessesMentioning(dir).empty());
}

// --rollback_shards: both shards go back to the newest cut they hold intact (an incremental
// checkpoint and its full base), so the redone rounds see the weights and rows they saw the first
// time and the job ends with the undisturbed run's weights, rows and AUC, bit for bit.
TEST(CtrE2e, WithRollbackAShardKilledMidRunLeavesTheUndisturbedWeightsAndRows) {
  const std::string calm = RunDir("dlrm_rollback_calm");
  ASSERT_EQ(RunLaunch(calm, With(ShardKillJob(), {"--save_weights"})), 0);
  const std::string dir = RunDir("dlrm_rollback");
  ASSERT_EQ(RunWithShardKilled(dir, 5, 120,
                               With(ShardKillJob(), {"--rollback_shards", "--save_weights"})),
            0)
      << ReadAll(dir + "/launch.log");
  const int64_t version = RollbackVersionIn(ReadAll(dir + "/launch.log"));
  ASSERT_GT(version, 0) << ReadAll(dir + "/launch.log");
  EXPECT_EQ(version % 5, 0);
  const nlohmann::json s = Summary(dir);
  EXPECT_EQ(s["shard_restarts"], 1);
  EXPECT_EQ(s["shard_rollbacks"], 1);
  EXPECT_EQ(s["restored_versions"], nlohmann::json::array({version, version})) << s.dump();
  EXPECT_EQ(s["samples_skipped"], 0);
  const nlohmann::json undisturbed = Summary(calm);
  EXPECT_EQ(s["test_auc"], undisturbed["test_auc"]);
  EXPECT_EQ(s["test_logloss"], undisturbed["test_logloss"]);
  EXPECT_EQ(s["versions"], undisturbed["versions"]);
  EXPECT_EQ(ReadAll(dir + "/weights.f32"), ReadAll(calm + "/weights.f32"));
  EXPECT_TRUE(ProcessesMentioning(dir).empty());
}

TEST(CtrE2e, AMalformedLineFailsTheRunNamingItOrIsSkippedAndCounted) {
  const std::string data = RunDir("ctr_bad");
  std::filesystem::copy_file(ClickData() + "/test.tsv", data + "/test.tsv");
  {
    std::ifstream in(ClickData() + "/train.tsv");
    std::ofstream out(data + "/train.tsv");
    std::string line;
    for (int i = 0; i < 4000 && std::getline(in, line); ++i) {
      out << (i == 2 ? "1\tnot-a-count" + line.substr(line.find('\t', 2)) : line) << "\n";
    }
  }
  const std::string strict = RunDir("ctr_strict");
  EXPECT_EQ(WaitExit(StartLaunch(strict, With(Dlrm(data), {"--workers=1"}))), 2);
  const std::string log = ReadAll(strict + "/launch.log");
  EXPECT_TRUE(absl::StrContains(log, data + "/train.tsv:3: I1: 'not-a-count' is not an integer"))
      << log;
  EXPECT_TRUE(absl::StrContains(log, "worker-0 exited with code 2")) << log;
  EXPECT_TRUE(ProcessesMentioning(strict).empty());
  const std::string lenient = RunDir("ctr_lenient");
  ASSERT_EQ(RunLaunch(lenient, With(Dlrm(data), {"--workers=1", "--skip_bad_lines"}), false), 0);
  EXPECT_TRUE(absl::StrContains(ReadAll(lenient + "/launch.log"), "1 malformed lines skipped"))
      << ReadAll(lenient + "/launch.log");
}

// SIGTERM while ps_datagen writes: it stops at once, exits 143 (128 + SIGTERM) naming the split,
// and leaves no file of it, whole or partial.
TEST(CtrE2e, DatagenStoppedBySigtermLeavesNoFileAndExits143) {
  const std::string dir = RunDir("ctr_datagen_stopped");
  const std::string out = dir + "/data";
  const pid_t datagen =
      Spawn({BinDir() + "/ps_datagen", "ctr", "--out=" + out, "--train=5000000", "--test=1000"},
            dir + "/datagen.log");
  const std::string partial = out + "/train.tsv.partial";
  for (int i = 0; i < 300 && !std::filesystem::exists(partial); ++i) usleep(20000);
  ASSERT_TRUE(std::filesystem::exists(partial)) << ReadAll(dir + "/datagen.log");
  ASSERT_EQ(Signal(datagen, SIGTERM), 0);
  EXPECT_EQ(WaitExit(datagen), 128 + SIGTERM);
  const std::string log = ReadAll(dir + "/datagen.log");
  EXPECT_TRUE(absl::StrContains(log, out + "/train.tsv not written: stopped after ")) << log;
  EXPECT_TRUE(std::filesystem::is_empty(out)) << "left in " << out;
}

}  // namespace
}  // namespace ps::e2e
