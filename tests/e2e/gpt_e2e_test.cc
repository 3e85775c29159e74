// End-to-end on text: ps_launch trains the gpt model on a character corpus with real shard and
// worker processes, reports the validation loss per character and tokens/s, and a corpus that
// cannot be read fails the run naming it.

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/base/random.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/e2e_util.h"

namespace ps::e2e {
namespace {

// Words drawn at random: structure a small model learns in a few hundred steps.
std::string Corpus() {
  static const std::string path = [] {
    const std::string file = RunDir("gpt_corpus") + "/corpus.txt";
    const char* words[] = {"in ", "the ", "beginning ", "was ", "word, ", "and ", "light. "};
    Rng rng(3);
    std::string text;
    while (text.size() < 40000) text += words[rng.Below(7)];
    std::ofstream(file) << text;
    return file;
  }();
  return path;
}

std::vector<std::string> Gpt(const std::string& data) {
  return {"--model=gpt",  "--data=text:" + data, "--layers=1",  "--heads=2",      "--dim=16",
          "--context=16", "--batch_size=4",      "--steps=150", "--shards=2",     "--workers=2",
          "--mode=bsp",   "--optimizer=adamw",   "--lr=0.01",   "--clip_norm=1.0"};
}

TEST(GptE2e, TrainsOnTextAndReportsTheValidationLossPerCharacter) {
  const std::string dir = RunDir("gpt_bsp");
  ASSERT_EQ(RunLaunch(dir, Gpt(Corpus())), 0) << ReadAll(dir + "/launch.log");
  const nlohmann::json s = nlohmann::json::parse(ReadAll(dir + "/summary.json"));
  const double val = s["val_loss"];
  std::printf("val_loss %.4f, train_loss %.4f, %.0f tokens/s\n", val, s["train_loss"].get<double>(),
              s["tokens_per_sec"].get<double>());
  // 24 characters: a model that learned nothing scores ln 24 = 3.18 nats per character.
  EXPECT_LT(val, std::log(24.0) - 1.0);
  EXPECT_EQ(s["val_tokens"], (4000 - 1) / 16 * 16);  // the last 10 %, whole windows
  EXPECT_GT(s["tokens_per_sec"].get<double>(), 0.0);
  EXPECT_EQ(s["gradients_applied"], s["gradients_expected"]);
  EXPECT_EQ(s["gradients_applied"], 2 * 2 * 150);  // 2 workers x 2 shards x 150 steps
  EXPECT_EQ(s["steps"], 150);
  EXPECT_TRUE(ProcessesMentioning(dir).empty());
}

// The sampling the README shows: the shards of a finished job held up (--hold_s), `ps_worker
// --generate` pulls their weights and continues a prompt in the corpus's characters, the same
// text for the same seed; a model of another shape is refused by the shards.
TEST(GptE2e, PsWorkerGenerateContinuesAPromptFromTheTrainedShards) {
  const std::string dir = RunDir("gpt_generate");
  const pid_t launch = StartLaunch(dir, With(Gpt(Corpus()), {"--hold_s=300"}));
  ASSERT_GT(launch, 0);
  const absl::Time deadline = absl::Now() + absl::Seconds(300);
  while (!std::filesystem::exists(dir + "/summary.json") && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(std::filesystem::exists(dir + "/summary.json")) << ReadAll(dir + "/launch.log");
  std::vector<std::string> servers;
  for (int s = 0; s < 2; ++s) {
    const std::string port = ReadAll(absl::StrCat(dir, "/ps-", s, ".port"));
    servers.push_back(absl::StrCat("127.0.0.1:", absl::StripAsciiWhitespace(port)));
  }
  const std::string prompt = "in the ";
  // The model's flags of the job (Gpt()'s first six), then what to sample.
  const std::vector<std::string> gpt = Gpt(Corpus());
  auto generate = [&](const std::string& seed, const std::string& dim) {
    std::vector<std::string> args = {BinDir() + "/ps_worker"};
    args.insert(args.end(), gpt.begin(), gpt.begin() + 6);
    args = With(args, {"--dim=" + dim, "--generate=40", "--prompt=" + prompt, "--temperature=0.8",
                       "--seed=" + seed, "--servers=" + absl::StrJoin(servers, ",")});
    const std::string log = absl::StrCat(dir, "/generate-", seed, "-", dim, ".log");
    const int code = RunTool(args, log);
    // The text is the line that starts with the prompt (the log lines go to stderr).
    std::string text;
    for (absl::string_view line : absl::StrSplit(ReadAll(log), '\n')) {
      if (absl::StartsWith(line, prompt)) text = std::string(line);
    }
    return std::make_pair(code, text.empty() ? ReadAll(log) : text);
  };
  const auto [code, text] = generate("1", "16");
  ASSERT_EQ(code, 0) << text;
  ASSERT_EQ(text.size(), prompt.size() + 40) << text;
  const std::string corpus = ReadAll(Corpus());
  for (char c : text) EXPECT_NE(corpus.find(c), std::string::npos) << "'" << c << "' in " << text;
  EXPECT_EQ(generate("1", "16").second, text);  // the same seed, the same text
  // Another shape has another layout fingerprint: refused, naming it.
  const auto [other_code, other_log] = generate("1", "32");
  EXPECT_EQ(other_code, 1) << other_log;
  EXPECT_TRUE(absl::StrContains(other_log, "fingerprint")) << other_log;
  Signal(launch, SIGTERM);  // ends the hold early
  EXPECT_EQ(WaitExit(launch), 0) << ReadAll(dir + "/launch.log");
  EXPECT_TRUE(ProcessesMentioning(dir).empty());
}

TEST(GptE2e, ACorpusThatCannotBeReadFailsTheRunNamingIt) {
  const std::string dir = RunDir("gpt_missing");
  // The workers exit 2 (an input error: not restarted), and so does the launcher.
  EXPECT_EQ(WaitExit(StartLaunch(dir, Gpt("/nonexistent/corpus.txt"))), 2);
  EXPECT_TRUE(absl::StrContains(ReadAll(dir + "/launch.log"), "/nonexistent/corpus.txt"))
      << ReadAll(dir + "/launch.log");
  EXPECT_TRUE(ProcessesMentioning(dir).empty());
}

}  // namespace
}  // namespace ps::e2e
