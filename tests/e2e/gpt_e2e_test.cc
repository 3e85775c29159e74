// End-to-end on text: ps_launch trains the gpt model on a character corpus with real shard and
// worker processes, reports the validation loss per character and tokens/s, and a corpus that
// cannot be read fails the run naming it.

#include <cmath>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

TEST(GptE2e, ACorpusThatCannotBeReadFailsTheRunNamingIt) {
  const std::string dir = RunDir("gpt_missing");
  // The workers exit 2 (an input error: not restarted), the launcher 1.
  EXPECT_EQ(WaitExit(StartLaunch(dir, Gpt("/nonexistent/corpus.txt"))), 1);
  EXPECT_TRUE(absl::StrContains(ReadAll(dir + "/launch.log"), "/nonexistent/corpus.txt"))
      << ReadAll(dir + "/launch.log");
  EXPECT_TRUE(ProcessesMentioning(dir).empty());
}

}  // namespace
}  // namespace ps::e2e
