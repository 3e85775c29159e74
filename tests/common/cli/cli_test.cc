#include "common/cli/cli.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, cli_test_steps, 0, "A number flag of this test.");
ABSL_FLAG(bool, cli_test_switch, true, "A boolean flag of this test.");

namespace ps {
namespace {

// RefuseBadCommandLineFlags over `args` (after the program's name).
void Check(std::vector<std::string> args) {
  args.insert(args.begin(), "cli_test");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  RefuseBadCommandLineFlags(static_cast<int>(argv.size()), argv.data());
}

// What a launcher that does not pass this file's flags on would drop: the ones not at their
// default, whichever way they were set.
TEST(ChangedFlagsOf, NamesTheFlagsOfAFileThatDifferFromTheirDefault) {
  const std::string file = "common/cli/cli_test.cc";
  EXPECT_TRUE(ChangedFlagsOf(file).empty());
  absl::SetFlag(&FLAGS_cli_test_steps, 3);
  absl::SetFlag(&FLAGS_cli_test_switch, false);
  EXPECT_EQ(ChangedFlagsOf(file), (std::vector<std::string>{"cli_test_steps", "cli_test_switch"}));
  absl::SetFlag(&FLAGS_cli_test_steps, 0);
  absl::SetFlag(&FLAGS_cli_test_switch, true);
  EXPECT_TRUE(ChangedFlagsOf(file).empty());
}

TEST(OrdinalOfName, TakesTheDigitsAfterTheLastDash) {
  EXPECT_EQ(OrdinalOfName("ps-3"), 3);
  EXPECT_EQ(OrdinalOfName("my-cluster-ps-12"), 12);
  EXPECT_EQ(OrdinalOfName("ps-0"), 0);
  EXPECT_EQ(OrdinalOfName("ps"), std::nullopt);
  EXPECT_EQ(OrdinalOfName("ps-"), std::nullopt);
  EXPECT_EQ(OrdinalOfName("ps-3a"), std::nullopt);
  EXPECT_EQ(OrdinalOfName("ps-1-"), std::nullopt);
}

TEST(ExitCodeOf, ConfigurationErrorsAre2AndOtherFailures1) {
  EXPECT_EQ(ExitCodeOf(absl::OkStatus()), 0);
  EXPECT_EQ(ExitCodeOf(absl::InvalidArgumentError("bad flag")), kExitConfigurationError);
  EXPECT_EQ(ExitCodeOf(absl::NotFoundError("no such file")), kExitConfigurationError);
  EXPECT_EQ(ExitCodeOf(absl::PermissionDeniedError("read-only")), kExitConfigurationError);
  EXPECT_EQ(ExitCodeOf(absl::UnauthenticatedError("wrong token")), kExitConfigurationError);
  EXPECT_EQ(ExitCodeOf(absl::DataLossError("disk full")), 1);
  EXPECT_EQ(ExitCodeOf(absl::UnavailableError("shard down")), 1);
  EXPECT_EQ(ExitCodeOf(absl::ResourceExhaustedError("memory")), 1);
}

TEST(IndexFromEnvironment, ReadsAnIndexOrAPodOrdinal) {
  ::setenv("PS_TEST_INDEX", "7", 1);
  EXPECT_EQ(IndexFromEnvironment("PS_TEST_INDEX", false), 7);
  ::setenv("PS_TEST_POD", "ps-4", 1);
  EXPECT_EQ(IndexFromEnvironment("PS_TEST_POD", true), 4);
  ::unsetenv("PS_TEST_INDEX");
  EXPECT_EQ(IndexFromEnvironment("PS_TEST_INDEX", false), std::nullopt);
}

TEST(IndexFromEnvironmentDeathTest, ABadValueExitsWithCode2) {
  ::setenv("PS_TEST_BAD", "seven", 1);
  EXPECT_EXIT(IndexFromEnvironment("PS_TEST_BAD", false), testing::ExitedWithCode(2),
              "PS_TEST_BAD='seven' does not give an index");
  ::setenv("PS_TEST_BAD", "ps", 1);
  EXPECT_EXIT(IndexFromEnvironment("PS_TEST_BAD", true), testing::ExitedWithCode(2),
              "expected NAME-N");
}

TEST(IndexFromFlagOrEnvironment, TakesTheFlagThenTheEnvironmentThenZero) {
  ::setenv("PS_TEST_INDEX", "7", 1);
  EXPECT_EQ(IndexFromFlagOrEnvironment("rank", 3, "PS_TEST_INDEX", false), 3);
  EXPECT_EQ(IndexFromFlagOrEnvironment("rank", 0, "PS_TEST_INDEX", false), 0);
  EXPECT_EQ(IndexFromFlagOrEnvironment("rank", -1, "PS_TEST_INDEX", false), 7);
  ::unsetenv("PS_TEST_INDEX");
  EXPECT_EQ(IndexFromFlagOrEnvironment("rank", -1, "PS_TEST_INDEX", false), 0);
}

TEST(IndexFromFlagOrEnvironmentDeathTest, ANegativeIndexOtherThanMinusOneExitsWithCode2) {
  ::setenv("PS_TEST_POD", "ps-4", 1);
  EXPECT_EXIT(IndexFromFlagOrEnvironment("shard_id", -2, "PS_TEST_POD", true),
              testing::ExitedWithCode(2),
              "--shard_id -2: give an index >= 0, or -1 to take it from \\$PS_TEST_POD");
}

TEST(RefuseBadCommandLineFlags, TakesFlagsInEveryFormAndLeavesWhatFollowsDoubleDash) {
  Check({"--cli_test_steps", "5", "one", "--nocli_test_switch", "--help", "--", "--not_ours"});
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_steps), 5);
  EXPECT_FALSE(absl::GetFlag(FLAGS_cli_test_switch));
  Check({"-cli_test_steps=7", "--cli_test_switch"});
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_steps), 7);
  EXPECT_TRUE(absl::GetFlag(FLAGS_cli_test_switch));
}

// Abseil alone exits 1; bad input exits 2 in this project, so that supervisors do not restart a
// process whose command line can never work.
TEST(RefuseBadCommandLineFlagsDeathTest, AnUnknownFlagOrABadValueExitsWithCode2) {
  EXPECT_EXIT(Check({"--cli_test_stepz=5"}), testing::ExitedWithCode(2),
              "ERROR: Unknown command line flag 'cli_test_stepz'");
  EXPECT_EXIT(Check({"--cli_test_steps", "two"}), testing::ExitedWithCode(2),
              "ERROR: Illegal value 'two' specified for flag 'cli_test_steps'");
  EXPECT_EXIT(Check({"--cli_test_steps"}), testing::ExitedWithCode(2),
              "ERROR: Missing the value for the flag 'cli_test_steps'");
  EXPECT_EXIT(Check({"--nocli_test_steps"}), testing::ExitedWithCode(2),
              "ERROR: Unknown command line flag 'nocli_test_steps'");
  EXPECT_EXIT(Check({"--cli_test_switch=maybe"}), testing::ExitedWithCode(2),
              "ERROR: Illegal value 'maybe' specified for flag 'cli_test_switch'");
}

}  // namespace
}  // namespace ps
