// AUC and log-loss against values worked by hand.

#include "common/metrics/classification.h"

#include <cmath>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(RocAuc, CountsOrderedPairsAndHalfTies) {
  // Of the 4 (positive, negative) pairs, 3 are ordered right: 0.35 > 0.1, 0.8 > 0.1, 0.8 > 0.4.
  EXPECT_DOUBLE_EQ(RocAuc({0.1f, 0.4f, 0.35f, 0.8f}, {0, 0, 1, 1}), 0.75);
  EXPECT_DOUBLE_EQ(RocAuc({0.9f, 0.1f}, {1, 0}), 1.0);
  EXPECT_DOUBLE_EQ(RocAuc({0.9f, 0.1f}, {0, 1}), 0.0);
  EXPECT_DOUBLE_EQ(RocAuc({0.5f, 0.5f, 0.5f}, {1, 0, 1}), 0.5);
  // One tie between a positive and a negative among 2 x 2 pairs: (1 + 0.5 + 1 + 1) / 4.
  EXPECT_DOUBLE_EQ(RocAuc({0.2f, 0.7f, 0.7f, 0.9f}, {0, 0, 1, 1}), 0.875);
  EXPECT_TRUE(std::isnan(RocAuc({0.1f, 0.2f}, {1, 1})));
  EXPECT_TRUE(std::isnan(RocAuc({}, {})));
}

TEST(LogLoss, MeanNatsWithClipping) {
  // (-log 0.9f - log(1 - 0.1f)) / 2: both about -log 0.9.
  EXPECT_NEAR(LogLoss({0.9f, 0.1f}, {1, 0}), -std::log(0.9), 1e-7);
  EXPECT_NEAR(LogLoss({0.25f}, {0}), -std::log(0.75), 1e-12);
  EXPECT_NEAR(LogLoss({0.0f}, {1}), -std::log(1e-7), 1e-9);
  EXPECT_NEAR(LogLoss({1.0f}, {1}), -std::log1p(-1e-7), 1e-12);
  EXPECT_EQ(LogLoss({}, {}), 0.0);
}

}  // namespace
}  // namespace ps
