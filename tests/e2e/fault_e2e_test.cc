// Faults end to end, with real processes on loopback: a worker killed with SIGKILL and
// restarted, a shard killed with SIGKILL and restored from its checkpoint, lost push replies and
// and duplicated pushes, and TLS with a cluster token.

#include <signal.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/e2e_util.h"

namespace ps::e2e {
namespace {

class FaultE2e : public testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(DataDir() + "/train-images-idx3-ubyte.gz")) {
      FAIL() << "Fashion-MNIST is missing in " << DataDir() << ": run scripts/setup.sh";
    }
  }
};

pid_t PidOf(const std::string& dir, const std::string& name) {
  return static_cast<pid_t>(std::stol(ReadAll(dir + "/" + name + ".pid")));
}

// The work account of a job that lost nothing: every declared gradient applied on every shard.
void ExpectAllWorkApplied(const nlohmann::json& summary) {
  EXPECT_EQ(summary["samples_skipped"], 0) << summary.dump();
  EXPECT_GT(summary["gradients_expected"].get<int64_t>(), 0) << summary.dump();
  EXPECT_EQ(summary["gradients_applied"], summary["gradients_expected"]) << summary.dump();
}

// A BSP job of 2 workers on `train_limit` samples, 2 epochs, whose shards checkpoint every
// `checkpoint_every` updates into <dir>/checkpoints and are restarted `restart_delay_s` after
// they die; `extra` flags after those.
pid_t StartShardRestartingRun(const std::string& dir, const std::string& train_limit,
                              int checkpoint_every, int restart_delay_s,
                              const std::vector<std::string>& extra = {}) {
  return StartLaunch(
      dir,
      With(With(Common(train_limit),
                {"--workers=2", "--mode=bsp", "--epochs=2",
                 "--checkpoint_root=" + dir + "/checkpoints",
                 "--checkpoint_every=" + std::to_string(checkpoint_every), "--restart_shards",
                 "--restart_delay_s=" + std::to_string(restart_delay_s)}),
           extra),
      /*quiet=*/false);
}

// BSP, 4 workers: worker 1 is killed with SIGKILL mid-epoch and restarted 2 s later by the
// launcher. Its lease (1 s) expires meanwhile, so the others go on without it; it comes back at
// the clock the shards hold, and the job ends as accurate as an undisturbed run. The rounds it
// missed are skipped work: the summary counts them exactly, and the launch fails, since BSP
// requires all work by default. The whole training set for 6 epochs, so that the job outlasts the
// outage by far: it runs at about 30 000 samples/s here, and in CI, beside container builds, a
// 2-epoch job once ended before the restarted process had logged a step.
TEST_F(FaultE2e, KilledWorkerRejoinsAtTheShardsClockAndItsSkippedStepsFailTheJob) {
  const std::vector<std::string> args = {"--data=fashion-mnist:" + DataDir(),
                                         "--train_limit=0",
                                         "--test_limit=0",
                                         "--shards=2",
                                         "--workers=4",
                                         "--mode=bsp",
                                         "--epochs=6",
                                         "--lease_ms=1000",
                                         "--seed=3"};
  const std::string calm = RunDir("calm");
  ASSERT_EQ(RunLaunch(calm, args), 0);
  const std::string dir = RunDir("worker_kill");
  const pid_t launch = StartLaunch(dir, With(args, {"--restart_workers", "--restart_delay_s=2"}));
  ASSERT_TRUE(WaitForSteps(dir + "/worker-1.jsonl", 40, 120)) << ReadAll(dir + "/launch.log");
  ASSERT_EQ(Signal(PidOf(dir, "worker-1"), SIGKILL), 0);
  ASSERT_EQ(WaitExit(launch), 1) << ReadAll(dir + "/launch.log");
  EXPECT_TRUE(absl::StrContains(ReadAll(dir + "/launch.log"),
                                "samples were never trained and all work was required"))
      << ReadAll(dir + "/launch.log");

  const std::string metrics = dir + "/worker-1.jsonl";
  const std::vector<std::string> starts = LinesOfKind(metrics, "start");
  ASSERT_EQ(starts.size(), 2u) << ReadAll(metrics);
  const double total = Field(starts[0], "total_steps");
  // The steps the first process pushed, then the ones of the restarted process.
  std::vector<double> first, second;
  bool restarted = false;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    if (absl::StrContains(line, "\"kind\":\"start\"")) restarted = Field(line, "resume_step") > 0;
    if (!absl::StrContains(line, "\"kind\":\"step\"")) continue;
    (restarted ? second : first).push_back(Field(line, "step"));
  }
  ASSERT_GE(first.size(), 40u);
  ASSERT_FALSE(second.empty());
  const double resume = Field(starts[1], "resume_step");
  // The shards kept the killed worker's clock (at least the steps it logged) and moved it past
  // the rounds applied without it; the new process starts exactly there and runs to the end.
  EXPECT_GE(resume, first.back() + 1);
  EXPECT_GT(resume, first.back() + 1) << "the others should have gone on during the outage";
  EXPECT_EQ(second.front(), resume);
  EXPECT_EQ(second.back(), total - 1);
  for (size_t i = 1; i < second.size(); ++i) EXPECT_EQ(second[i], second[i - 1] + 1);

  // The work account: worker 1 skipped exactly the rounds it was moved past (it pushed at
  // least the steps it logged), on both shards; the others skipped nothing.
  const nlohmann::json summary = nlohmann::json::parse(ReadAll(dir + "/summary.json"));
  EXPECT_EQ(summary["worker_restarts"], 1);
  const nlohmann::json& work = summary["work"];
  ASSERT_EQ(work.size(), 4u);
  const int64_t skipped = work[1]["steps_skipped"];
  EXPECT_GE(skipped, 1);
  // Shards apply BSP rounds on their own: when the new process registers, one shard may be a
  // round ahead of the other (its round `resume` applied without worker 1). The worker resumes at
  // the smaller clock; on the other shard that step is a duplicate, and one more step skipped.
  EXPECT_LE(skipped, resume - (first.back() + 1) + 1);
  EXPECT_EQ(work[1]["samples_skipped"], skipped * 32);
  for (int r : {0, 2, 3}) EXPECT_EQ(work[r]["samples_skipped"], 0) << r;
  EXPECT_EQ(summary["samples_skipped"], skipped * 32);
  EXPECT_EQ(summary["gradients_expected"], 2 * 4 * total);
  // Each other worker's every step on both shards; worker 1's but the skipped ones (counted on
  // the shard that applied fewer), plus on one shard at most two more: the push that may have
  // reached one shard only when it was killed, and the step it resumed at when the other shard
  // was a round ahead (a duplicate there). Neither step counts as trained: no update of the
  // other shard contains it.
  for (int r : {0, 2, 3}) EXPECT_EQ(work[r]["gradients_applied"], 2 * total) << r;
  const int64_t applied_1 = work[1]["gradients_applied"];
  EXPECT_GE(applied_1, 2 * (total - skipped));
  EXPECT_LE(applied_1, 2 * (total - skipped) + 2);
  EXPECT_EQ(summary["gradients_applied"], 3 * 2 * total + applied_1);
  const double calm_accuracy = Field(ReadAll(calm + "/summary.json"), "test_accuracy");
  EXPECT_GT(calm_accuracy, 0.80);
  EXPECT_NEAR(summary["test_accuracy"].get<double>(), calm_accuracy, 0.005);
  std::printf(
      "worker kill: killed after step %.0f, resumed at step %.0f of %.0f, %lld steps skipped; "
      "accuracy %.4f (undisturbed %.4f)\n",
      first.back(), resume, total, static_cast<long long>(skipped),
      summary["test_accuracy"].get<double>(), calm_accuracy);
  EXPECT_TRUE(ProcessesMentioning(dir).empty());
}

// The same kill with a lease the restart fits in: the restarted worker is back before its lease
// runs out, the rounds wait for it, and every gradient of the job is applied. The lease is 60 s,
// not the default 10: on a machine loaded by container builds (CI runs them alongside), starting
// the new process and loading its data once took longer than 10 s.
TEST_F(FaultE2e, AWorkerRestartedWithinItsLeaseLosesNoWork) {
  const std::string dir = RunDir("worker_kill_in_lease");
  const pid_t launch = StartLaunch(
      dir, With(Common("12000"), {"--workers=3", "--mode=bsp", "--epochs=2", "--restart_workers",
                                  "--restart_delay_s=1", "--lease_ms=60000"}));
  ASSERT_TRUE(WaitForSteps(dir + "/worker-2.jsonl", 30, 120)) << ReadAll(dir + "/launch.log");
  ASSERT_EQ(Signal(PidOf(dir, "worker-2"), SIGKILL), 0);
  ASSERT_EQ(WaitExit(launch), 0) << ReadAll(dir + "/launch.log");
  const nlohmann::json summary = nlohmann::json::parse(ReadAll(dir + "/summary.json"));
  EXPECT_EQ(summary["worker_restarts"], 1);
  ExpectAllWorkApplied(summary);
  EXPECT_EQ(LinesOfKind(dir + "/worker-2.jsonl", "start").size(), 2u);
  EXPECT_TRUE(ProcessesMentioning(dir).empty());
}

// A shard down longer than any fixed retry budget (65 s; the workers once gave up after 60):
// the workers wait for it, it comes back from its checkpoint, they register again, redo the
// steps it lost, and every gradient is applied on every shard.
TEST_F(FaultE2e, AShardDownForMoreThanAMinuteLosesNoWork) {
  const std::string dir = RunDir("shard_down_long");
  const pid_t launch = StartShardRestartingRun(dir, "12000", 20, 65);
  ASSERT_TRUE(WaitForSteps(dir + "/worker-0.jsonl", 80, 120)) << ReadAll(dir + "/launch.log");
  ASSERT_TRUE(WaitForCheckpoint(dir + "/checkpoints/ps-1", 60)) << ReadAll(dir + "/launch.log");
  ASSERT_EQ(Signal(PidOf(dir, "ps-1"), SIGKILL), 0);
  ASSERT_EQ(WaitExit(launch), 0) << ReadAll(dir + "/launch.log");
  const std::string log = ReadAll(dir + "/launch.log");
  EXPECT_TRUE(absl::StrContains(log, "still retrying until it is back")) << log;
  const nlohmann::json summary = nlohmann::json::parse(ReadAll(dir + "/summary.json"));
  EXPECT_EQ(summary["shard_restarts"], 1);
  ExpectAllWorkApplied(summary);
  EXPECT_GT(summary["test_accuracy"].get<double>(), 0.6);
  EXPECT_TRUE(ProcessesMentioning(dir).empty());
}

// A shard killed with SIGKILL is restarted on its port by the launcher, restores its newest
// checkpoint (its version then equals the checkpoint's), the workers register again and the job
// finishes. 4 epochs, so that the job outlasts the wait for a finished checkpoint by far.
TEST_F(FaultE2e, KilledShardRestoresItsCheckpointAndTheJobFinishes) {
  const std::string dir = RunDir("shard_kill");
  ASSERT_EQ(RunWithShardKilled(
                dir, 25, 80,
                {"--data=fashion-mnist:" + DataDir(), "--train_limit=12000", "--test_limit=0",
                 "--shards=2", "--workers=2", "--mode=bsp", "--epochs=4"}),
            0)
      << ReadAll(dir + "/launch.log");

  const std::string log = ReadAll(dir + "/launch.log");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      log, m, std::regex(R"(\[ps-1\].*restored \S*ckpt-0*(\d+)\.ps \(version (\d+)\))")))
      << log;
  const int64_t file_version = std::stoll(m[1]);
  EXPECT_EQ(std::stoll(m[2]), file_version);
  EXPECT_GE(file_version, 25);
  EXPECT_EQ(file_version % 25, 0);
  // The restarted shard serves at exactly the checkpoint's version.
  EXPECT_TRUE(absl::StrContains(log, absl::StrCat("version=", file_version, " (restored)"))) << log;
  const std::string summary = ReadAll(dir + "/summary.json");
  EXPECT_EQ(Field(summary, "shard_restarts"), 1);
  EXPECT_TRUE(absl::StrContains(summary, absl::StrCat("\"restored_versions\":[-1,", file_version)))
      << summary;
  EXPECT_GT(Field(summary, "test_accuracy"), 0.80);
  ExpectAllWorkApplied(nlohmann::json::parse(summary));
  std::printf("shard kill: restored checkpoint version %lld; accuracy %.4f\n",
              static_cast<long long>(file_version), Field(summary, "test_accuracy"));
  // Both workers registered again after the restart.
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(LinesOfKind(absl::StrCat(dir, "/worker-", r, ".jsonl"), "rejoin").size(), 1u) << r;
  }
  EXPECT_TRUE(ProcessesMentioning(dir).empty());
}

// --rollback_shards: shard 1 is killed with SIGKILL; the launcher kills shard 0 too and restarts
// both at the newest checkpoint version both hold intact, removing shard 0's newer ones. The
// rounds after that cut are redone against the same weights as the first time, so the job ends
// with the undisturbed run's weights, bit for bit (without the rollback they differ: the rounds
// shard 1 redoes see shard 0's newer weights).
TEST_F(FaultE2e, KilledShardWithRollbackEndsWithTheUndisturbedWeightsBitForBit) {
  const std::vector<std::string> job =
      With(Common("12000"), {"--workers=2", "--mode=bsp", "--epochs=4", "--save_weights"});
  const std::string calm = RunDir("rollback_calm");
  ASSERT_EQ(RunLaunch(calm, job), 0);
  const std::string dir = RunDir("rollback");
  ASSERT_EQ(RunWithShardKilled(dir, 25, 80, With(job, {"--rollback_shards"})), 0)
      << ReadAll(dir + "/launch.log");
  const std::string log = ReadAll(dir + "/launch.log");
  const int64_t version = RollbackVersionIn(log);
  EXPECT_GE(version, 25) << log;
  EXPECT_EQ(version % 25, 0);
  for (int s = 0; s < 2; ++s) {
    EXPECT_TRUE(std::regex_search(log, std::regex(absl::StrCat(R"(\[ps-)", s, R"(\].*version=)",
                                                               version, R"( \(restored\))"))))
        << s << " " << log;
  }
  const nlohmann::json summary = nlohmann::json::parse(ReadAll(dir + "/summary.json"));
  EXPECT_EQ(summary["shard_restarts"], 1);
  EXPECT_EQ(summary["shard_rollbacks"], 1);
  EXPECT_EQ(summary["restored_versions"], nlohmann::json::array({version, version}))
      << summary.dump();
  ExpectAllWorkApplied(summary);
  const nlohmann::json undisturbed = nlohmann::json::parse(ReadAll(calm + "/summary.json"));
  EXPECT_EQ(summary["test_accuracy"], undisturbed["test_accuracy"]);
  EXPECT_EQ(summary["versions"], undisturbed["versions"]);
  const auto a = ReadWeights(calm + "/weights.f32");
  const auto b = ReadWeights(dir + "/weights.f32");
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GT(a.size(), 0u);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  std::printf(
      "shard kill with rollback: both shards back to version %lld; accuracy %.4f "
      "(undisturbed %.4f)\n",
      static_cast<long long>(version), summary["test_accuracy"].get<double>(),
      undisturbed["test_accuracy"].get<double>());
  // Rolling back is refused where there is no common cut to go back to.
  const std::string refused = RunDir("rollback_refused");
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--rollback_shards"},
        {"--rollback_shards", "--restart_shards", "--checkpoint_root=" + refused,
         "--checkpoint_every=5", "--mode=asp"},
        {"--rollback_shards", "--restart_shards", "--checkpoint_root=" + refused,
         "--checkpoint_seconds=1"}}) {
    EXPECT_EQ(WaitExit(StartLaunch(refused, With(job, flags))), 2) << absl::StrJoin(flags, " ");
    EXPECT_TRUE(absl::StrContains(ReadAll(refused + "/launch.log"),
                                  "--rollback_shards puts every shard back to one BSP cut"))
        << ReadAll(refused + "/launch.log");
  }
  EXPECT_TRUE(ProcessesMentioning(dir).empty());
}

// SIGTERM on a shard mid-run: it writes a final checkpoint after it stopped accepting updates,
// so the restarted shard restores exactly the version it stopped at (no acknowledged update is
// lost), far from any periodic checkpoint.
TEST_F(FaultE2e, SigtermedShardRestoresTheVersionItStoppedAt) {
  const std::string dir = RunDir("shard_term");
  const pid_t launch = StartShardRestartingRun(dir, "8000", 100000, 1);
  ASSERT_TRUE(WaitForSteps(dir + "/worker-0.jsonl", 60, 120)) << ReadAll(dir + "/launch.log");
  ASSERT_EQ(Signal(PidOf(dir, "ps-0"), SIGTERM), 0);
  ASSERT_EQ(WaitExit(launch), 0) << ReadAll(dir + "/launch.log");
  const std::string log = ReadAll(dir + "/launch.log");
  std::smatch stopped, restored;
  ASSERT_TRUE(
      std::regex_search(log, stopped, std::regex(R"(\[ps-0\].*final checkpoint at version (\d+))")))
      << log;
  ASSERT_TRUE(
      std::regex_search(log, restored, std::regex(R"(\[ps-0\].*version=(\d+) \(restored\))")))
      << log;
  EXPECT_EQ(restored[1], stopped[1]);
  // Worker 0 logged 60 steps, so its 60th pull (step 59) saw version 59; round 59 itself may
  // still wait for worker 1's push when the signal lands, so 59 is the bound, not 60.
  EXPECT_GE(std::stoll(stopped[1]), 59);
  const std::string summary = ReadAll(dir + "/summary.json");
  EXPECT_EQ(Field(summary, "shard_restarts"), 1);
  // 8000 / 64 = 125 steps x 2 epochs: every shard applied every round exactly once.
  EXPECT_TRUE(absl::StrContains(summary, "\"versions\":[250,250]")) << summary;
}

// --rollback_shards, but no version on both shards: a SIGTERMed shard's final checkpoint (which
// lost nothing) is its alone, far from any periodic one. The other shard keeps running and the
// stopped one restarts alone at its final checkpoint; every round is applied once.
TEST_F(FaultE2e, UnderRollbackAShardWithNoCutInCommonRestartsAlone) {
  const std::string dir = RunDir("rollback_alone");
  const pid_t launch = StartShardRestartingRun(dir, "8000", 100000, 1, {"--rollback_shards"});
  ASSERT_TRUE(WaitForSteps(dir + "/worker-0.jsonl", 60, 120)) << ReadAll(dir + "/launch.log");
  const pid_t survivor = PidOf(dir, "ps-1");
  ASSERT_EQ(Signal(PidOf(dir, "ps-0"), SIGTERM), 0);
  ASSERT_EQ(WaitExit(launch), 0) << ReadAll(dir + "/launch.log");
  const std::string log = ReadAll(dir + "/launch.log");
  EXPECT_TRUE(absl::StrContains(
      log, "no checkpoint version is on every shard; ps-0 restarts alone at its newest"))
      << log;
  EXPECT_EQ(PidOf(dir, "ps-1"), survivor);
  const nlohmann::json summary = nlohmann::json::parse(ReadAll(dir + "/summary.json"));
  EXPECT_EQ(summary["shard_restarts"], 1);
  EXPECT_EQ(summary["shard_rollbacks"], 0);
  EXPECT_EQ(summary["versions"], nlohmann::json::array({250, 250})) << summary.dump();
  ExpectAllWorkApplied(summary);
}

// Replies lost after the shard applied the push (every third one) and every push sent twice:
// exactly-once makes the final BSP weights equal those of a fault-free run, bit for bit, whether
// steps are pushed whole or in pieces.
TEST_F(FaultE2e, LostRepliesAndDuplicatedPushesLeaveTheWeightsBitForBit) {
  const std::vector<std::string> args =
      With(Common("4000"), {"--workers=2", "--mode=bsp", "--epochs=1", "--save_weights"});
  const std::string clean = RunDir("clean");
  const std::string faulty = RunDir("faulty");
  ASSERT_EQ(RunLaunch(clean, args), 0);
  ASSERT_EQ(RunLaunch(faulty,
                      With(args, {"--fault_drop_push_reply_every=3", "--fault_duplicate_pushes"})),
            0);
  const std::string summary = ReadAll(faulty + "/summary.json");
  const double accepted = Field(summary, "pushes_accepted");
  // 4000 / 64 = 62 steps x 2 workers x 2 shards; each push also sent once more, and a third of
  // the replies lost and retried.
  EXPECT_EQ(accepted, 62 * 2 * 2);
  EXPECT_GE(Field(summary, "pushes_duplicate"), accepted + accepted / 3 - 2);
  EXPECT_EQ(Field(ReadAll(clean + "/summary.json"), "pushes_duplicate"), 0);
  const auto a = ReadWeights(clean + "/weights.f32");
  const auto b = ReadWeights(faulty + "/weights.f32");
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GT(a.size(), 0u);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);

  // The same faults under priority scheduling: every step travels as pieces (each layer cut at
  // the shards' boundary), each piece's reply may be lost and each piece is sent twice; the
  // shards still apply every clock exactly once, and the weights are those of the clean run.
  const std::string pieces = RunDir("faulty_pieces");
  ASSERT_EQ(
      RunLaunch(pieces, With(args, {"--fault_drop_push_reply_every=3", "--fault_duplicate_pushes",
                                    "--priority", "--priority_min_part=0"})),
      0);
  const std::string pieces_summary = ReadAll(pieces + "/summary.json");
  EXPECT_EQ(Field(pieces_summary, "pushes_accepted"), 62 * 2 * 2);
  EXPECT_GT(Field(pieces_summary, "pieces_received"), 0);
  const auto c = ReadWeights(pieces + "/weights.f32");
  ASSERT_EQ(a.size(), c.size());
  EXPECT_EQ(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0);
}

// Mutual TLS and a cluster token: training works; ps_ctl without the token, with a wrong one,
// or with a client certificate of another CA is refused.
TEST_F(FaultE2e, TlsWithATokenTrainsAndRefusesStrangers) {
  const std::string dir = RunDir("tls");
  const char* src = std::getenv("PS_SOURCE_DIR");
  const std::string certs = dir + "/certs";
  ASSERT_EQ(
      RunTool({std::string(src != nullptr ? src : ".") + "/scripts/make_test_certs.sh", certs},
              dir + "/certs.log"),
      0)
      << ReadAll(dir + "/certs.log");
  ASSERT_EQ(RunLaunch(dir, With(Common("2048"),
                                {"--workers=2", "--mode=asp", "--epochs=1", "--tls_dir=" + certs,
                                 "--token_file=" + certs + "/token"})),
            0);
  EXPECT_GT(Field(ReadAll(dir + "/summary.json"), "test_accuracy"), 0.6);

  // A server of our own for the refusals (the launch's servers have stopped).
  const TestServer shard =
      StartServer(dir, "server",
                  {"--num_workers=1", "--tls_cert=" + certs + "/server.pem",
                   "--tls_key=" + certs + "/server.key", "--tls_ca=" + certs + "/ca.pem",
                   "--token_file=" + certs + "/token"});
  ASSERT_GT(shard.port, 0) << ReadAll(shard.log);
  const pid_t server = shard.pid;
  const std::string servers = absl::StrCat("--servers=localhost:", shard.port);
  const std::vector<std::string> ctl = {BinDir() + "/ps_ctl", "status", servers, "--timeout_s=3"};
  const std::string me = "--tls_cert=" + certs + "/client.pem";
  const std::string my_key = "--tls_key=" + certs + "/client.key";
  const std::string ca = "--tls_ca=" + certs + "/ca.pem";
  const std::string log = dir + "/ctl.log";
  std::ofstream(dir + "/wrong-token") << "not-the-token\n";
  EXPECT_EQ(RunTool(With(ctl, {me, my_key, ca, "--token_file=" + certs + "/token"}), log), 0)
      << ReadAll(log);
  // A refused token is the caller's configuration: exit 2, as for the worker below.
  EXPECT_EQ(RunTool(With(ctl, {me, my_key, ca}), log), 2);
  EXPECT_TRUE(absl::StrContains(ReadAll(log), "UNAUTHENTICATED")) << ReadAll(log);
  EXPECT_EQ(RunTool(With(ctl, {me, my_key, ca, "--token_file=" + dir + "/wrong-token"}), log), 2);
  EXPECT_TRUE(absl::StrContains(ReadAll(log), "UNAUTHENTICATED")) << ReadAll(log);
  EXPECT_EQ(RunTool(With(ctl, {"--tls_cert=" + certs + "/other-client.pem",
                               "--tls_key=" + certs + "/other-client.key", ca,
                               "--token_file=" + certs + "/token"}),
                    log),
            1);
  EXPECT_TRUE(absl::StrContains(ReadAll(log), "UNAVAILABLE")) << ReadAll(log);
  // Health needs no token; the shard holds no parameters yet.
  EXPECT_EQ(RunTool({BinDir() + "/ps_ctl", "health", servers, me, my_key, ca}, log), 0)
      << ReadAll(log);
  EXPECT_EQ(RunTool({BinDir() + "/ps_ctl", "health", servers, me, my_key, ca,
                     "--service=ps.v1.ParameterServer"},
                    log),
            1);
  EXPECT_TRUE(absl::StrContains(ReadAll(log), "NOT_SERVING")) << ReadAll(log);
  // A worker with the wrong token exits 2, a configuration error: neither the launcher's
  // --restart_workers nor a Kubernetes Job retries it.
  const std::string worker_log = dir + "/worker.log";
  EXPECT_EQ(RunTool({BinDir() + "/ps_worker", servers, me, my_key, ca,
                     "--token_file=" + dir + "/wrong-token", "--data=fashion-mnist:" + DataDir(),
                     "--train_limit=320", "--test_limit=100", "--epochs=1"},
                    worker_log),
            2)
      << ReadAll(worker_log);
  EXPECT_TRUE(absl::StrContains(ReadAll(worker_log), "UNAUTHENTICATED")) << ReadAll(worker_log);
  // Only the authenticated status call reached a handler.
  Signal(server, SIGTERM);
  EXPECT_EQ(WaitExit(server), 0);
}

}  // namespace
}  // namespace ps::e2e
