#include "worker/delay_injector.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(DelayInjector, NoOptionsNoDelay) {
  DelayInjector d(DelayOptions{});
  for (int s = 0; s < 10; ++s)
    EXPECT_EQ(d.DelayFor(s, absl::Milliseconds(10)), absl::ZeroDuration());
}

TEST(DelayInjector, SlowdownScalesTheNormalStep) {
  DelayOptions o;
  o.slowdown = 3.0;
  DelayInjector d(o);
  // The first step primes the average; a constant work time keeps it there.
  EXPECT_EQ(d.DelayFor(0, absl::Milliseconds(10)), absl::Milliseconds(20));
  EXPECT_EQ(d.DelayFor(1, absl::Milliseconds(10)), absl::Milliseconds(20));
  // A step twice as long moves the average by a tenth of the difference: 11 ms.
  EXPECT_EQ(d.DelayFor(2, absl::Milliseconds(20)), absl::Milliseconds(22));
}

TEST(DelayInjector, JitterHitsAboutPOfStepsAndRepeatsBySeed) {
  DelayOptions o;
  o.jitter_probability = 0.1;
  o.jitter_factor = 4.0;
  o.seed = 3;
  o.rank = 1;
  DelayInjector a(o), b(o);
  int hits = 0;
  for (int s = 0; s < 10000; ++s) {
    const absl::Duration da = a.DelayFor(s, absl::Milliseconds(5));
    EXPECT_EQ(da, b.DelayFor(s, absl::Milliseconds(5)));
    if (da > absl::ZeroDuration()) {
      EXPECT_EQ(da, absl::Milliseconds(15));  // 4x the step: 3 steps' worth added
      ++hits;
    }
  }
  EXPECT_GT(hits, 900);
  EXPECT_LT(hits, 1100);
  o.rank = 2;  // another worker draws other steps
  DelayInjector c(o);
  int same = 0;
  for (int s = 0; s < 1000; ++s) same += a.Jittered(s) && c.Jittered(s);
  EXPECT_LT(same, 40);
}

TEST(DelayInjector, PauseOnceAtItsStep) {
  DelayOptions o;
  o.pause_step = 4;
  o.pause = absl::Seconds(2);
  DelayInjector d(o);
  for (int s = 0; s < 8; ++s) {
    EXPECT_EQ(d.DelayFor(s, absl::Milliseconds(1)),
              s == 4 ? absl::Seconds(2) : absl::ZeroDuration());
  }
}

TEST(DelayInjector, ValidationNamesTheOption) {
  DelayOptions o;
  o.slowdown = 0.5;
  EXPECT_EQ(ValidateDelayOptions(o).code(), absl::StatusCode::kInvalidArgument);
  o = DelayOptions{};
  o.jitter_probability = 1.5;
  EXPECT_EQ(ValidateDelayOptions(o).code(), absl::StatusCode::kInvalidArgument);
  o = DelayOptions{};
  o.jitter_factor = 0.0;
  EXPECT_EQ(ValidateDelayOptions(o).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateDelayOptions(DelayOptions{}).ok());
}

TEST(DelayInjector, JitterAndPauseAreParsedOrRefusedNamingTheirSource) {
  DelayOptions o;
  ASSERT_TRUE(ParseJitter("--jitter", "0.25:3", &o).ok());
  ASSERT_TRUE(ParsePause("--pause", "7:1.5", &o).ok());
  EXPECT_EQ(o.jitter_probability, 0.25);
  EXPECT_EQ(o.jitter_factor, 3.0);
  EXPECT_EQ(o.pause_step, 7);
  EXPECT_EQ(o.pause, absl::Milliseconds(1500));
  // Empty: left as they were.
  ASSERT_TRUE(ParseJitter("--jitter", "", &o).ok());
  ASSERT_TRUE(ParsePause("--pause", "", &o).ok());
  EXPECT_EQ(o.jitter_factor, 3.0);
  EXPECT_EQ(o.pause_step, 7);
  const absl::Status jitter = ParseJitter("PS_JITTER", "often", &o);
  EXPECT_EQ(jitter.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(jitter.message(), "PS_JITTER 'often' must be PROBABILITY:FACTOR, e.g. 0.1:4");
  for (const char* bad : {"-1:2", "3", "3:x", "1:2:3"}) {
    const absl::Status pause = ParsePause("--pause", bad, &o);
    EXPECT_EQ(pause.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(pause.message(),
              absl::StrCat("--pause '", bad, "' must be STEP:SECONDS, e.g. 100:5"));
  }
}

}  // namespace
}  // namespace ps
