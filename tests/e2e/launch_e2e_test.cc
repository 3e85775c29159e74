// End-to-end: ps_launch with real ps_server and ps_worker processes on loopback, training on a
// subset of Fashion-MNIST. Checks the data-parallel guarantees of DESIGN.md section 3 from the
// files the run writes, and that the launcher leaves no process behind.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/e2e/e2e_util.h"

namespace ps::e2e {
namespace {

class LaunchE2e : public testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(DataDir() + "/train-images-idx3-ubyte.gz")) {
      FAIL() << "Fashion-MNIST is missing in " << DataDir()
             << ": run scripts/setup.sh (it installs dataset-fashion-mnist)";
    }
  }
};

// BSP with 2 workers x 32, 1 worker x 64 and 1 worker x 32 x accumulate 2 (same seed, plain SGD)
// see the same global batches and must give the same per-step losses and final weights.
TEST_F(LaunchE2e, BspDataParallelismEqualsOneLargeBatch) {
  const std::vector<std::string> sgd = {"--mode=bsp", "--optimizer=sgd", "--lr=0.1",
                                        "--epochs=2", "--seed=7",        "--save_weights"};
  const std::string two = RunDir("two_workers");
  const std::string one = RunDir("one_worker");
  const std::string acc = RunDir("accumulate");
  ASSERT_EQ(RunLaunch(two, With(With(Common("640"), sgd), {"--workers=2", "--batch_size=32"})), 0);
  ASSERT_EQ(RunLaunch(one, With(With(Common("640"), sgd), {"--workers=1", "--batch_size=64"})), 0);
  ASSERT_EQ(RunLaunch(acc, With(With(Common("640"), sgd),
                                {"--workers=1", "--batch_size=32", "--accumulate=2"})),
            0);
  const auto r0 = StepLines(two + "/worker-0.jsonl");
  const auto r1 = StepLines(two + "/worker-1.jsonl");
  const auto single = StepLines(one + "/worker-0.jsonl");
  const auto accumulated = StepLines(acc + "/worker-0.jsonl");
  ASSERT_EQ(single.size(), 20u);  // 640 / 64 = 10 steps x 2 epochs
  ASSERT_EQ(r0.size(), single.size());
  ASSERT_EQ(r1.size(), single.size());
  ASSERT_EQ(accumulated.size(), single.size());
  for (size_t s = 0; s < single.size(); ++s) {
    const double want = Field(single[s], "loss");
    const double split = (Field(r0[s], "loss") + Field(r1[s], "loss")) / 2;
    EXPECT_NEAR(split, want, 1e-5 * want) << "step " << s;
    EXPECT_NEAR(Field(accumulated[s], "loss"), want, 1e-5 * want) << "step " << s;
  }
  const auto w_one = ReadWeights(one + "/weights.f32");
  ASSERT_GT(w_one.size(), 1000u);
  float scale = 0;
  for (float v : w_one) scale = std::max(scale, std::abs(v));
  for (const std::string& dir : {two, acc}) {
    const auto w = ReadWeights(dir + "/weights.f32");
    ASSERT_EQ(w.size(), w_one.size());
    float worst = 0;
    for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::abs(w[i] - w_one[i]));
    EXPECT_LE(worst, 1e-5f * scale) << dir;
  }
  // The BSP summary reports every gradient fresh.
  const std::string summary = ReadAll(two + "/summary.json");
  EXPECT_EQ(Field(summary, "max_staleness"), 0);
  EXPECT_EQ(Field(summary, "workers"), 2);
  // The payloads went through shared memory and the calls over the shards' local sockets (the
  // defaults between local processes); with --local_calls=false the calls are gRPC's, and with
  // --shared_memory=false the payloads travel in the messages: BSP gives the same weights bit for
  // bit.
  EXPECT_GT(Field(summary, "shared_memory_payloads"), 0);
  EXPECT_GT(Field(summary, "local_calls"), 0);
  struct Variant {
    const char* flag;
    bool shared_memory;
  };
  for (const Variant v :
       {Variant{"--local_calls=false", true}, Variant{"--shared_memory=false", false}}) {
    const std::string dir = RunDir(absl::StrCat("two_workers_", v.flag + 2));
    ASSERT_EQ(
        RunLaunch(dir, With(With(Common("640"), sgd), {"--workers=2", "--batch_size=32", v.flag})),
        0);
    const std::string variant = ReadAll(dir + "/summary.json");
    EXPECT_EQ(Field(variant, "shared_memory_payloads") > 0, v.shared_memory) << v.flag;
    EXPECT_EQ(Field(variant, "local_calls"), 0) << v.flag;
    EXPECT_EQ(ReadWeights(dir + "/weights.f32"), ReadWeights(two + "/weights.f32")) << v.flag;
  }
}

// SSP(1) with 3 workers, one 4x slower: no gradient staler than (W-1)(2s+1) = 6.
TEST_F(LaunchE2e, SspStalenessStaysWithinTheBoundWithAStraggler) {
  const std::string dir = RunDir("ssp");
  ASSERT_EQ(RunLaunch(dir, With(Common("3072"),
                                {"--workers=3", "--mode=ssp", "--staleness=1", "--straggler=1:4",
                                 "--epochs=1", "--batch_size=16", "--optimizer=sgd", "--lr=0.05"})),
            0);
  const std::string summary = ReadAll(dir + "/summary.json");
  const double max_staleness = Field(summary, "max_staleness");
  EXPECT_LE(max_staleness, 6);
  EXPECT_GT(max_staleness, 0) << "an SSP run with a straggler should see some staleness";
  for (int r = 0; r < 3; ++r) {
    for (const std::string& line : StepLines(absl::StrCat(dir, "/worker-", r, ".jsonl"))) {
      EXPECT_LE(Field(line, "staleness"), 6) << line;
    }
  }
  EXPECT_TRUE(ProcessesMentioning(dir).empty());
}

// With --base_batch and no --lr_scaling, each optimizer's rate grows by its own rule: BSP
// rounds of 2 x 16 over a base of 16 give Adam sqrt(2) x its rate and momentum SGD 2 x.
TEST_F(LaunchE2e, TheDefaultScalingRuleIsTheOptimizersOwn) {
  struct Case {
    std::string optimizer, lr, rule;
    double lr_effective;
  };
  for (const Case& c : {Case{"adam", "0.001", "sqrt", 0.001 * std::sqrt(2.0)},
                        Case{"momentum", "0.01", "linear", 0.02}}) {
    const std::string dir = RunDir("default_scaling_" + c.optimizer);
    ASSERT_EQ(RunLaunch(dir, With(Common("256"), {"--workers=2", "--mode=bsp", "--epochs=1",
                                                  "--batch_size=16", "--base_batch=16",
                                                  "--optimizer=" + c.optimizer, "--lr=" + c.lr})),
              0)
        << ReadAll(dir + "/launch.log");
    const std::string summary = ReadAll(dir + "/summary.json");
    EXPECT_TRUE(absl::StrContains(summary, "\"lr_scaling\":\"" + c.rule + "\"")) << summary;
    EXPECT_NEAR(Field(summary, "lr_effective"), c.lr_effective, 1e-6 * c.lr_effective) << summary;
  }
}

// ASP: the fast worker's pulls never wait, however slow the other worker is.
TEST_F(LaunchE2e, AspNeverBlocksAPull) {
  const std::string dir = RunDir("asp");
  ASSERT_EQ(RunLaunch(dir, With(Common("2048"),
                                {"--workers=2", "--mode=asp", "--straggler=1:5", "--epochs=1",
                                 "--batch_size=16", "--optimizer=sgd", "--lr=0.05"})),
            0);
  for (int r = 0; r < 2; ++r) {
    const auto lines = StepLines(absl::StrCat(dir, "/worker-", r, ".jsonl"));
    ASSERT_EQ(lines.size(), 64u);  // 2048 / (2 x 16)
    for (const std::string& line : lines) EXPECT_EQ(Field(line, "server_wait_ms"), 0) << line;
  }
}

// Compression and overlap through the binaries: top-k gradients with error feedback, bf16
// weights and prefetching workers. The bytes on the wire are exactly what the encodings imply,
// and the model still learns.
// With the prefetch and asynchronous pushes too: every step still gets its own metrics line, in
// order, once its push is acknowledged.
TEST_F(LaunchE2e, CompressedGradientsAndWeightsWithOverlapTrainThroughTheBinaries) {
  const std::string dir = RunDir("compressed");
  ASSERT_EQ(
      RunLaunch(dir, With(Common("2048"),
                          {"--workers=2", "--mode=asp", "--epochs=2", "--batch_size=16",
                           "--optimizer=sgd", "--lr=0.05", "--overlap", "--async_push",
                           "--push_encoding=topk", "--topk_ratio=0.05", "--pull_encoding=bf16"})),
      0)
      << ReadAll(dir + "/launch.log");
  const std::string summary = ReadAll(dir + "/summary.json");
  const int64_t params = static_cast<int64_t>(Field(summary, "params"));
  // Shard s holds params / 2 elements (shard 0 one more when odd); top-k sends ceil(5 %) of each
  // as 8-byte (index, value) pairs; bf16 weights are 2 bytes each.
  int64_t want_push = 0;
  for (int s = 0; s < 2; ++s) {
    const int64_t range = params / 2 + (s < params % 2 ? 1 : 0);
    want_push += 8 * static_cast<int64_t>(std::ceil(0.05 * static_cast<double>(range)));
  }
  for (int r = 0; r < 2; ++r) {
    const auto lines = StepLines(absl::StrCat(dir, "/worker-", r, ".jsonl"));
    ASSERT_EQ(lines.size(), 128u);  // 2048 / (2 x 16) x 2 epochs
    for (size_t i = 0; i < lines.size(); ++i) {
      EXPECT_EQ(Field(lines[i], "step"), static_cast<double>(i)) << lines[i];
    }
    for (const std::string& line : lines) {
      EXPECT_EQ(Field(line, "push_bytes"), want_push) << line;
      EXPECT_EQ(Field(line, "pull_bytes"), 2 * params) << line;
    }
  }
  EXPECT_GT(Field(summary, "test_accuracy"), 0.6);
}

// An ASP run with 4 workers and random delays, replayed on one machine from the shards' update
// records, gives the same final weights to the bit. Every worker holds its step-2 gradient for
// 2 s before pushing it: a run of milliseconds per worker could otherwise finish before the next
// worker process has started (a loaded machine), and nothing would be stale.
TEST_F(LaunchE2e, ReplayOfAnAspRunReproducesTheWeightsBitForBit) {
  const std::string dir = RunDir("replay");
  ASSERT_EQ(RunLaunch(dir, With(Common("2560"),
                                {"--workers=4", "--mode=asp", "--epochs=1", "--jitter=0.2:3",
                                 "--pause_worker=0:2:2,1:2:2,2:2:2,3:2:2", "--replayable",
                                 "--save_weights"})),
            0);
  EXPECT_GT(Field(ReadAll(dir + "/summary.json"), "max_staleness"), 0)
      << "the run should be asynchronous enough for the order to matter";
  std::string cmd = ReadAll(dir + "/replay.cmd");
  while (!cmd.empty() && cmd.back() == '\n') cmd.pop_back();
  std::vector<std::string> args = absl::StrSplit(cmd, ' ', absl::SkipEmpty());
  ASSERT_EQ(RunTool(args, dir + "/replay.log"), 0) << ReadAll(dir + "/replay.log");
  const auto run = ReadWeights(dir + "/weights.f32");
  const auto replayed = ReadWeights(dir + "/replayed.f32");
  ASSERT_EQ(run.size(), replayed.size());
  ASSERT_GT(run.size(), 0u);
  EXPECT_EQ(std::memcmp(run.data(), replayed.data(), run.size() * sizeof(float)), 0);
  // The comparison can fail: another seed (other initial weights and samples) does not match.
  for (auto& a : args) {
    if (absl::StartsWith(a, "--seed=")) a = "--seed=2";
  }
  ASSERT_EQ(RunTool(args, dir + "/replay2.log"), 0) << ReadAll(dir + "/replay2.log");
  const auto other = ReadWeights(dir + "/replayed.f32");
  EXPECT_NE(std::memcmp(run.data(), other.data(), run.size() * sizeof(float)), 0);
  // A record that is not there is the flags' fault: exit 2, and the weights stay as they were.
  for (auto& a : args) {
    if (absl::StartsWith(a, "--records=")) a = "--records=" + dir + "/no-such.updates";
  }
  EXPECT_EQ(RunTool(args, dir + "/replay3.log"), 2) << ReadAll(dir + "/replay3.log");
  EXPECT_TRUE(absl::StrContains(ReadAll(dir + "/replay3.log"),
                                "NOT_FOUND: cannot read update record " + dir + "/no-such.updates"))
      << ReadAll(dir + "/replay3.log");
  EXPECT_EQ(ReadWeights(dir + "/replayed.f32"), other);
}

// A worker that finds no data exits 2, a configuration error: the launcher stops every process
// and exits 2 too, so that whoever runs it (a sweep, a Job) does not retry it.
TEST_F(LaunchE2e, AChildsConfigurationErrorStopsEveryProcessAndExits2) {
  const std::string dir = RunDir("failure");
  const int code =
      WaitExit(StartLaunch(dir, {"--data=fashion-mnist:/nonexistent-data", "--lr_schedule=constant",
                                 "--workers=2", "--shards=2", "--epochs=1"}));
  const std::string log = ReadAll(dir + "/launch.log");
  EXPECT_EQ(code, 2) << log;
  EXPECT_TRUE(absl::StrContains(log, "/nonexistent-data")) << log;
  EXPECT_TRUE(absl::StrContains(log, "exited with code 2, a configuration error")) << log;
  EXPECT_TRUE(ProcessesMentioning(dir).empty());
  EXPECT_FALSE(std::filesystem::exists(dir + "/summary.json"));
}

// --quiet hides a child's ordinary lines, but not those that say why it failed: the last 20 it
// hid are shown when it exits non-zero. A Python worker here, whose lines are not the binaries'
// log lines.
TEST_F(LaunchE2e, QuietShowsTheLastLinesOfAChildThatFails) {
  if (!std::filesystem::exists(BinDir() + "/../python/ps_train/__init__.py")) {
    GTEST_SKIP() << "the ps_train package is not built beside " << BinDir();
  }
  const std::string dir = RunDir("quiet_failure");
  std::ofstream(dir + "/fail.py") << "import sys\n"
                                     "for i in range(30):\n"
                                     "    print(f'line {i}')\n"
                                     "print('the reason it failed', file=sys.stderr)\n"
                                     "sys.exit(1)\n";
  EXPECT_EQ(
      WaitExit(StartLaunch(dir, {"--shards=1", "--workers=1", "--python=" + dir + "/fail.py"})), 1);
  const std::string log = ReadAll(dir + "/launch.log");
  EXPECT_TRUE(absl::StrContains(log,
                                "ps_launch: the last 20 lines of worker-0, which --quiet hid:\n"
                                "[worker-0] line 11\n"))
      << log;
  EXPECT_TRUE(absl::StrContains(log, "[worker-0] line 29\n[worker-0] the reason it failed\n"))
      << log;
  EXPECT_FALSE(absl::StrContains(log, "[worker-0] line 10\n")) << log;
  EXPECT_TRUE(absl::StrContains(log, "worker-0 exited with code 1")) << log;
  EXPECT_TRUE(ProcessesMentioning(dir).empty());
}

// The shards' flags are read and checked by the launcher as every shard will read them, and so
// are the launcher's own: a bad value exits 2 before any process starts or the run folder is
// made.
TEST(LaunchFlags, ABadShardFlagExits2BeforeAnythingStarts) {
  const std::string dir = RunDir("bad_shard_flags");
  const std::string run = dir + "/run";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--mode=nope"}, "unknown mode 'nope' (bsp|ssp|asp)"},
      {{"--mode=ssp", "--staleness=-1"}, "staleness must be >= 0, got -1"},
      {{"--mode=bsp", "--staleness=3"}, "--staleness 3 applies to --mode ssp only, not bsp"},
      {{"--mode=asp", "--staleness=1"}, "--staleness 1 applies to --mode ssp only, not asp"},
      {{"--mode=asp", "--update_rule=dc-asgd"}, "unknown update rule 'dc-asgd'"},
      {{"--mode=asp", "--backup_workers=1"}, "backup_workers applies to BSP only"},
      {{"--base_batch=32", "--lr_scaling=cube"}, "unknown learning-rate scaling rule 'cube'"},
      {{"--eviction=fifo"}, "fifo"},
      {{"--lease_ms=0"}, "--lease_ms must be >= 1"},
      {{"--full_checkpoint_every=0"}, "--full_checkpoint_every must be >= 1"},
      {{"--checkpoint_every=-1"}, "--checkpoint_seconds and --checkpoint_every must be >= 0"},
      {{"--tls_dir=" + dir}, "--tls_dir: cannot read " + dir + "/server.pem"},
      {{"--token_file=" + dir + "/no-token"}, "--token_file: cannot read " + dir + "/no-token"},
      // A shard restarted with nothing to restore would make the workers redo the whole job.
      {{"--restart_shards"}, "--restart_shards restarts a shard from its newest checkpoint"},
      {{"--max_restarts=-1"}, "--max_restarts and --restart_delay_s must be >= 0"},
  };
  for (const auto& [flags, message] : cases) {
    SCOPED_TRACE(flags.back());
    const std::string log = dir + "/launch.log";
    std::vector<std::string> args = {BinDir() + "/ps_launch", "--metrics_dir=" + run};
    args.insert(args.end(), flags.begin(), flags.end());
    EXPECT_EQ(RunTool(args, log), 2) << ReadAll(log);
    EXPECT_TRUE(absl::StrContains(ReadAll(log), message)) << ReadAll(log);
    EXPECT_FALSE(std::filesystem::exists(run));
  }
}

// A checkpoint folder that cannot be made is the flags' fault: the shard exits 2, and so does the
// launcher, at once (no restart can fix it).
TEST(LaunchFlags, AShardThatCannotMakeItsCheckpointFolderExits2) {
  const std::string dir = RunDir("checkpoint_folder");
  std::ofstream(dir + "/a-file") << "not a folder\n";
  const std::string log = dir + "/launch.log";
  EXPECT_EQ(RunTool({BinDir() + "/ps_launch", "--checkpoint_root=" + dir + "/a-file",
                     "--checkpoint_every=50", "--restart_shards", "--metrics_dir=" + dir + "/run"},
                    log),
            2)
      << ReadAll(log);
  EXPECT_TRUE(
      absl::StrContains(ReadAll(log), "cannot create checkpoint folder " + dir + "/a-file/ps-0"))
      << ReadAll(log);
  EXPECT_TRUE(absl::StrContains(ReadAll(log), "ps-0 exited with code 2, a configuration error"))
      << ReadAll(log);
  EXPECT_TRUE(ProcessesMentioning(dir).empty());
}

// Under BSP with backup workers a round closes without the last pushes, so the learning rate is
// scaled from the samples of the pushes it averages: 3 of 4 workers' batches of 32.
TEST_F(LaunchE2e, ABspRoundWithBackupWorkersScalesTheRateByThePushesItAverages) {
  const std::string dir = RunDir("dry_run_backup");
  for (const auto& [backup, effective] :
       std::vector<std::pair<std::string, std::string>>{{"0", "128"}, {"1", "96"}}) {
    const std::string out = dir + "/commands-" + backup + ".txt";
    ASSERT_EQ(RunTool({BinDir() + "/ps_launch", "--dry_run", "--shards=1", "--workers=4",
                       "--mode=bsp", "--backup_workers=" + backup, "--base_batch=32",
                       "--data=fashion-mnist:" + DataDir(), "--metrics_dir=" + dir + "/run"},
                      out),
              0)
        << ReadAll(out);
    EXPECT_TRUE(absl::StrContains(ReadAll(out), " --effective_batch=" + effective + " "))
        << ReadAll(out);
  }
}

// --dry_run prints the command line of every process the run would start, in a form a shell
// reads back word for word, has worker 0 check its flags and data, and writes nothing.
TEST_F(LaunchE2e, DryRunPrintsEveryCommandAndChecksTheWorkersFlagsAndData) {
  const std::string dir = RunDir("dry_run");
  const std::string run = dir + "/run 'one'";
  const std::string out = dir + "/commands.txt";
  ASSERT_EQ(RunTool({BinDir() + "/ps_launch", "--dry_run", "--shards=2", "--workers=3",
                     "--mode=ssp", "--staleness=2", "--base_batch=64", "--lr_scaling=sqrt",
                     "--data=fashion-mnist:" + DataDir(), "--metrics_dir=" + run},
                    out),
            0)
      << ReadAll(out);
  EXPECT_FALSE(std::filesystem::exists(run));
  // The commands, without worker 0's lines (on stderr, in the same file here).
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(ReadAll(out), '\n', absl::SkipEmpty())) {
    if (!absl::StartsWith(line, "[worker-0]")) lines.emplace_back(line);
  }
  ASSERT_EQ(lines.size(), 6u) << ReadAll(out);  // 2 shards, 3 workers, the final evaluation
  EXPECT_TRUE(absl::StrContains(ReadAll(out), "[worker-0] ")) << ReadAll(out);
  EXPECT_TRUE(absl::StrContains(ReadAll(out), " flags and data checked")) << ReadAll(out);
  EXPECT_TRUE(
      absl::StrContains(lines[0], "/ps_server --shard_id=0 --num_shards=2 --num_workers=3 "))
      << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[1], "/ps_server --shard_id=1 ")) << lines[1];
  for (const std::string& shard : {lines[0], lines[1]}) {
    EXPECT_TRUE(absl::StrContains(shard, " --mode=ssp ")) << shard;
    EXPECT_TRUE(absl::StrContains(shard, " --staleness=2 ")) << shard;
    // The scaling: under SSP one update is one worker's batch of 32.
    EXPECT_TRUE(absl::StrContains(shard, " --base_batch=64 ")) << shard;
    EXPECT_TRUE(absl::StrContains(shard, " --lr_scaling=sqrt ")) << shard;
    EXPECT_TRUE(absl::StrContains(shard, " --effective_batch=32 ")) << shard;
  }
  EXPECT_TRUE(absl::StrContains(lines[4], "/ps_worker --rank=2 --num_workers=3 ")) << lines[4];
  EXPECT_TRUE(absl::StrContains(lines[5], "/ps_worker --evaluate ")) << lines[5];
  // A shell splits worker 0's line back into its arguments: the quoted ones come back whole.
  const std::string words = dir + "/words.txt";
  ASSERT_EQ(
      RunTool({"/bin/sh", "-c", "eval \"set -- $0\"; printf '%s\\n' \"$@\"", lines[2]}, words), 0)
      << ReadAll(words);
  const std::vector<std::string> args = absl::StrSplit(ReadAll(words), '\n', absl::SkipEmpty());
  EXPECT_EQ(args.size(), static_cast<size_t>(std::count(lines[2].begin(), lines[2].end(), ' ') -
                                             std::count(run.begin(), run.end(), ' ') + 1))
      << ReadAll(words);
  EXPECT_NE(std::find(args.begin(), args.end(), "--metrics_file=" + run + "/worker-0.jsonl"),
            args.end())
      << ReadAll(words);
  EXPECT_NE(std::find(args.begin(), args.end(), "--servers=<ps-0>,<ps-1>"), args.end())
      << ReadAll(words);
  // What only a worker judges: its encodings, its schedule, its data.
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"--push_encoding=bf17", "unknown encoding 'bf17'"},
      {"--jitter=0.1x4", "--jitter '0.1x4' must be PROBABILITY:FACTOR"},
      {"--eval_every=-1", "--eval_every must be >= 0 (0: only at epoch ends)"},
      {"--topk_ratio=2", "topk_ratio must be in (0, 1], not 2"},
      {"--data=fashion-mnist:" + dir + "/no-such-folder", dir + "/no-such-folder"}};
  for (const auto& [flag, message] : refused) {
    SCOPED_TRACE(flag);
    EXPECT_EQ(RunTool({BinDir() + "/ps_launch", "--dry_run", flag, "--metrics_dir=" + run}, out),
              2);
    EXPECT_TRUE(absl::StrContains(ReadAll(out), message)) << ReadAll(out);
    EXPECT_TRUE(absl::StrContains(ReadAll(out), "worker-0 exited with code 2")) << ReadAll(out);
    EXPECT_FALSE(std::filesystem::exists(run));
  }
  // The workload's flags the launcher reads itself: refused before worker 0 runs.
  EXPECT_EQ(RunTool({BinDir() + "/ps_launch", "--dry_run", "--train_limit=-3"}, out), 2);
  EXPECT_EQ(ReadAll(out), "ps_launch: --train_limit and --test_limit must be >= 0 (0: all)\n");
  EXPECT_EQ(RunTool({BinDir() + "/ps_launch", "--dry_run", "--max_restarts=-1"}, out), 2);
  EXPECT_EQ(ReadAll(out), "ps_launch: --max_restarts and --restart_delay_s must be >= 0\n");
  EXPECT_TRUE(ProcessesMentioning(dir).empty());
}

TEST_F(LaunchE2e, SigtermStopsEveryProcess) {
  const std::string dir = RunDir("sigterm");
  const pid_t pid =
      StartLaunch(dir, With(Common("0"), {"--workers=2", "--epochs=50", "--mode=ssp"}), false);
  // Wait until training is under way: worker 0 has written step metrics.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (StepLines(dir + "/worker-0.jsonl").size() < 5 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_GE(StepLines(dir + "/worker-0.jsonl").size(), 5u) << ReadAll(dir + "/launch.log");
  Signal(pid, SIGTERM);
  EXPECT_EQ(WaitExit(pid), 128 + SIGTERM);
  EXPECT_TRUE(ProcessesMentioning(dir).empty());
  // The servers shut down cleanly (they log their final version on the way out).
  EXPECT_TRUE(absl::StrContains(ReadAll(dir + "/launch.log"), "stopped at version"));
}

TEST(PsCtl, StatusReportsEveryShardAndFailsOnADeadOne) {
  const std::string dir = RunDir("ctl");
  std::vector<pid_t> servers;
  std::vector<std::string> addresses;
  for (int s = 0; s < 2; ++s) {
    const TestServer shard = StartServer(dir, absl::StrCat("ps-", s),
                                         {absl::StrCat("--shard_id=", s), "--num_shards=2",
                                          "--num_workers=3", "--mode=ssp", "--staleness=2"});
    ASSERT_GT(shard.pid, 0);
    servers.push_back(shard.pid);
    ASSERT_GT(shard.port, 0) << ReadAll(shard.log);
    addresses.push_back(absl::StrCat("127.0.0.1:", shard.port));
  }
  const std::string both = addresses[0] + "," + addresses[1];
  const std::string log = dir + "/ctl.log";
  EXPECT_EQ(RunTool({BinDir() + "/ps_ctl", "status", "--json", "--servers=" + both}, log), 0);
  const std::string out = ReadAll(log);
  EXPECT_TRUE(absl::StrContains(out, "\"shard_id\":0,\"mode\":\"ssp\",\"staleness_bound\":2"))
      << out;
  EXPECT_TRUE(absl::StrContains(out, "\"shard_id\":1,")) << out;
  EXPECT_TRUE(absl::StrContains(out, "\"rank\":2,\"state\":\"pending\"")) << out;
  EXPECT_EQ(RunTool({BinDir() + "/ps_ctl", "status", "--servers=" + both}, log), 0);
  EXPECT_TRUE(absl::StrContains(ReadAll(log), "staleness histogram")) << ReadAll(log);
  EXPECT_EQ(RunTool({BinDir() + "/ps_ctl", "--servers=" + both}, log), 2);  // no command
  for (pid_t pid : servers) {
    Signal(pid, SIGTERM);
    EXPECT_EQ(WaitExit(pid), 0);  // SIGTERM is an orderly shutdown for a server
  }
  EXPECT_EQ(RunTool({BinDir() + "/ps_ctl", "status", "--timeout_s=2", "--servers=" + both}, log),
            1);
  EXPECT_TRUE(absl::StrContains(ReadAll(log), "UNAVAILABLE")) << ReadAll(log);
}

// A worker built for another model than the one the shards hold is refused at registration.
// Restarting it cannot help, so it exits 2, the configuration error that neither ps_launch's
// --restart_workers nor a Kubernetes Job retries.
TEST(PsWorker, AWorkerOfAnotherModelThanTheShardsHoldExits2) {
  const std::string dir = RunDir("another-model");
  const TestServer shard = StartServer(dir, "server", {"--num_workers=2", "--mode=asp"});
  ASSERT_GT(shard.pid, 0);
  const pid_t server = shard.pid;
  ASSERT_GT(shard.port, 0) << ReadAll(shard.log);
  const std::vector<std::string> worker = {BinDir() + "/ps_worker",
                                           absl::StrCat("--servers=127.0.0.1:", shard.port),
                                           "--data=fashion-mnist:" + DataDir(),
                                           "--train_limit=320",
                                           "--test_limit=100",
                                           "--steps=1"};
  const std::string log = dir + "/worker.log";
  EXPECT_EQ(RunTool(With(worker, {"--rank=0", "--hidden=32"}), log), 0) << ReadAll(log);
  EXPECT_EQ(RunTool(With(worker, {"--rank=1"}), log), 2) << ReadAll(log);
  EXPECT_TRUE(absl::StrContains(ReadAll(log), "INVALID_ARGUMENT: the shards refuse this worker"))
      << ReadAll(log);
  EXPECT_TRUE(absl::StrContains(ReadAll(log), "the worker runs another model")) << ReadAll(log);
  Signal(server, SIGTERM);
  EXPECT_EQ(WaitExit(server), 0);
}

// A rank outside --num_workers is a flag error the worker sees on its own: it exits 2 at once,
// not after waiting --register_timeout_s for shards (none listens at the address given) that
// would refuse it.
TEST(PsWorker, ARankOutsideTheJobExits2WithoutWaitingForTheShards) {
  const std::string dir = RunDir("rank-outside");
  const std::string log = dir + "/worker.log";
  EXPECT_EQ(RunTool({BinDir() + "/ps_worker", "--servers=127.0.0.1:1", "--rank=2",
                     "--num_workers=2", "--register_timeout_s=30",
                     "--data=fashion-mnist:" + DataDir(), "--train_limit=320", "--test_limit=100"},
                    log),
            2)
      << ReadAll(log);
  EXPECT_TRUE(absl::StrContains(ReadAll(log), "--rank 2 is not in [0, --num_workers 2)"))
      << ReadAll(log);
}

// A GPU that is not there (no machine has 4097) is a configuration error: exit 2, which no
// launcher restarts, with the message naming what was found.
TEST(PsWorker, AMissingGpuExits2) {
  const std::string dir = RunDir("missing-gpu");
  const std::string log = dir + "/worker.log";
  EXPECT_EQ(RunTool({BinDir() + "/ps_worker", "--device=cuda:4096", "--check_only",
                     "--data=fashion-mnist:" + DataDir(), "--train_limit=320", "--test_limit=100"},
                    log),
            2)
      << ReadAll(log);
  EXPECT_TRUE(absl::StrContains(ReadAll(log), "FAILED_PRECONDITION")) << ReadAll(log);
}

}  // namespace
}  // namespace ps::e2e
