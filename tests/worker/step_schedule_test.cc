#include "worker/step_schedule.h"

#include <utility>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

ScheduleRequest Request(bool overlap, bool async_push, bool push_pull = true) {
  ScheduleRequest request;
  request.overlap = overlap;
  request.async_push = async_push;
  request.push_pull = push_pull;
  return request;
}

TEST(ChooseSchedule, BspRunsOneStepAtATimeWhateverTheFlags) {
  for (const bool overlap : {false, true}) {
    for (const bool async_push : {false, true}) {
      EXPECT_EQ(ChooseSchedule(Request(overlap, async_push), ConsistencyMode::kBsp, 0),
                Schedule::kPushPull);
      EXPECT_EQ(ChooseSchedule(Request(overlap, async_push, false), ConsistencyMode::kBsp, 0),
                Schedule::kSequential);
    }
  }
}

TEST(ChooseSchedule, SspAndAspServeTheRequest) {
  for (const ConsistencyMode mode : {ConsistencyMode::kSsp, ConsistencyMode::kAsp}) {
    EXPECT_EQ(ChooseSchedule(Request(true, false), mode, 1), Schedule::kOverlap);
    EXPECT_EQ(ChooseSchedule(Request(false, true), mode, 1), Schedule::kAsyncPush);
    EXPECT_EQ(ChooseSchedule(Request(true, true), mode, 1), Schedule::kPipelined);
    EXPECT_EQ(ChooseSchedule(Request(true, true, false), mode, 1), Schedule::kOverlapAsyncPush);
  }
  // The pipeline's pull of step c+2 would wait for this worker's own push of c+1.
  EXPECT_EQ(ChooseSchedule(Request(true, true), ConsistencyMode::kSsp, 0),
            Schedule::kOverlapAsyncPush);
  EXPECT_EQ(ChooseSchedule(Request(true, true), ConsistencyMode::kAsp, 0), Schedule::kPipelined);
}

TEST(ChooseSchedule, PriorityWinsInEveryMode) {
  ScheduleRequest request;
  request.priority = true;
  for (const ConsistencyMode mode :
       {ConsistencyMode::kBsp, ConsistencyMode::kSsp, ConsistencyMode::kAsp}) {
    EXPECT_EQ(ChooseSchedule(request, mode, 0), Schedule::kPriority);
    EXPECT_EQ(ScheduleShortfall(request, mode, 0), "");
  }
}

TEST(ScheduleShortfall, NamesTheFlagsBspLeavesOut) {
  EXPECT_EQ(ScheduleShortfall(Request(false, false), ConsistencyMode::kBsp, 0), "");
  EXPECT_EQ(ScheduleShortfall(Request(true, true), ConsistencyMode::kBsp, 0),
            "--overlap and --async_push left out under BSP: the pull of step c+1 waits for the "
            "round this worker's push of step c completes, so there is nothing to overlap");
  EXPECT_TRUE(absl::StartsWith(ScheduleShortfall(Request(true, false), ConsistencyMode::kBsp, 0),
                               "--overlap left out under BSP: "));
  EXPECT_TRUE(absl::StartsWith(ScheduleShortfall(Request(false, true), ConsistencyMode::kBsp, 0),
                               "--async_push left out under BSP: "));
}

TEST(ScheduleShortfall, NamesThePipelineSspZeroLeavesOut) {
  EXPECT_NE(ScheduleShortfall(Request(true, true), ConsistencyMode::kSsp, 0)
                .find("PushPull pipeline left out under SSP with --staleness 0"),
            std::string::npos);
  // Without PushPull no pipeline was asked for; with a bound of 1 it runs.
  EXPECT_EQ(ScheduleShortfall(Request(true, true, false), ConsistencyMode::kSsp, 0), "");
  EXPECT_EQ(ScheduleShortfall(Request(true, true), ConsistencyMode::kSsp, 1), "");
}

TEST(ScheduleShortfall, SspWithABoundAndAspServeEveryRequest) {
  const std::pair<ConsistencyMode, int> serving[] = {
      {ConsistencyMode::kSsp, 1}, {ConsistencyMode::kSsp, 4}, {ConsistencyMode::kAsp, 0}};
  for (const auto& [mode, staleness] : serving) {
    for (const bool overlap : {false, true}) {
      for (const bool async_push : {false, true}) {
        for (const bool push_pull : {false, true}) {
          EXPECT_EQ(ScheduleShortfall(Request(overlap, async_push, push_pull), mode, staleness), "")
              << ConsistencyModeName(mode) << " " << staleness << " " << overlap << async_push
              << push_pull;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ps
