// Prometheus /metrics end to end: a local run with --serve_metrics, scraped with curl while it
// trains and after it has written summary.json; the counters must agree with the run's files.

#include <signal.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/e2e/e2e_util.h"

namespace ps::e2e {
namespace {

// GET http://127.0.0.1:<port file's port>/metrics with curl.
std::string Scrape(const std::string& dir, const std::string& name) {
  const std::string port = std::string(
      absl::StripAsciiWhitespace(ReadAll(absl::StrCat(dir, "/", name, ".metrics_port"))));
  const std::string out = absl::StrCat(dir, "/", name, ".scrape");
  EXPECT_EQ(RunTool({"/usr/bin/curl", "-sf", "-o", out,
                     absl::StrCat("http://127.0.0.1:", port, "/metrics")},
                    out + ".log"),
            0)
      << name;
  return ReadAll(out);
}

// The value of the sample `name{labels}` (labels as they appear, e.g. shard="1"); NaN if absent.
double Metric(const std::string& text, const std::string& name, const std::string& labels) {
  const std::string prefix = labels.empty() ? name + " " : name + "{" + labels + "} ";
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, prefix)) continue;
    double v = 0;
    if (absl::SimpleAtod(line, &v)) return v;
  }
  return std::nan("");
}

TEST(MetricsE2e, ScrapedCountersAgreeWithTheRunsFiles) {
  if (!std::filesystem::exists(DataDir() + "/train-images-idx3-ubyte.gz")) {
    FAIL() << "Fashion-MNIST is missing in " << DataDir() << ": run scripts/setup.sh";
  }
  const std::string dir = RunDir("metrics");
  const pid_t launch = StartLaunch(
      dir, With(Common("8000"),
                {"--workers=2", "--mode=bsp", "--epochs=2", "--serve_metrics", "--hold_s=120"}));
  ASSERT_TRUE(WaitForSteps(dir + "/worker-0.jsonl", 20, 120)) << ReadAll(dir + "/launch.log");

  // During training: the worker's step counter lies between the step lines before and after.
  const size_t before = StepLines(dir + "/worker-0.jsonl").size();
  const std::string worker = Scrape(dir, "worker-0");
  const size_t after = StepLines(dir + "/worker-0.jsonl").size();
  const double steps = Metric(worker, "ps_worker_steps_total", "rank=\"0\"");
  EXPECT_GE(steps, before) << worker;
  EXPECT_LE(steps, after + 1) << worker;
  for (const char* name : {"ps_worker_samples_total", "ps_worker_pull_wait_seconds_total",
                           "ps_worker_samples_per_second", "ps_worker_staleness_max"}) {
    EXPECT_FALSE(std::isnan(Metric(worker, name, "rank=\"0\""))) << name << "\n" << worker;
  }
  EXPECT_TRUE(absl::StrContains(worker, "# TYPE ps_worker_steps_total counter")) << worker;

  // After training (the launcher holds the shards after writing summary.json): the shards'
  // counters equal the summary's.
  const absl::Time deadline = absl::Now() + absl::Seconds(180);
  while (!std::filesystem::exists(dir + "/summary.json") && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  absl::SleepFor(absl::Milliseconds(200));  // the file is complete once ps_launch says so
  const std::string summary = ReadAll(dir + "/summary.json");
  ASSERT_FALSE(summary.empty()) << ReadAll(dir + "/launch.log");
  double accepted = 0, applied = 0, staleness_count = 0;
  std::vector<double> versions;
  for (int s = 0; s < 2; ++s) {
    const std::string shard = Scrape(dir, absl::StrCat("ps-", s));
    const std::string label = absl::StrCat("shard=\"", s, "\"");
    accepted += Metric(shard, "ps_shard_pushes_accepted_total", label);
    versions.push_back(Metric(shard, "ps_shard_version", label));
    for (int r = 0; r < 2; ++r) {
      applied += Metric(shard, "ps_shard_gradients_applied_total",
                        absl::StrCat("rank=\"", r, "\",", label));
    }
    staleness_count += Metric(shard, "ps_shard_staleness_count", label);
    EXPECT_EQ(Metric(shard, "ps_shard_staleness_bucket", "le=\"+Inf\"," + label),
              Metric(shard, "ps_shard_staleness_count", label));
  }
  EXPECT_EQ(accepted, Field(summary, "pushes_accepted"));
  EXPECT_EQ(applied, Field(summary, "gradients_applied"));
  EXPECT_EQ(staleness_count, applied);
  EXPECT_TRUE(absl::StrContains(summary,
                                absl::StrCat("\"versions\":[", versions[0], ",", versions[1], "]")))
      << summary;
  // 8000 / 64 = 125 steps x 2 epochs, one BSP update per step on each shard.
  EXPECT_EQ(versions[0], 250);
  Signal(launch, SIGINT);
  EXPECT_EQ(WaitExit(launch), 0) << ReadAll(dir + "/launch.log");
  EXPECT_TRUE(ProcessesMentioning(dir).empty());
}

}  // namespace
}  // namespace ps::e2e
