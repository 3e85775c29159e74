#include "common/cli/cli.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(OrdinalOfName, TakesTheDigitsAfterTheLastDash) {
  EXPECT_EQ(OrdinalOfName("ps-3"), 3);
  EXPECT_EQ(OrdinalOfName("my-cluster-ps-12"), 12);
  EXPECT_EQ(OrdinalOfName("ps-0"), 0);
  EXPECT_EQ(OrdinalOfName("ps"), std::nullopt);
  EXPECT_EQ(OrdinalOfName("ps-"), std::nullopt);
  EXPECT_EQ(OrdinalOfName("ps-3a"), std::nullopt);
  EXPECT_EQ(OrdinalOfName("ps-1-"), std::nullopt);
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

}  // namespace
}  // namespace ps
