#include "server/shard.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/lendable_values.h"
#include "tests/support/test_shards.h"

namespace ps {
namespace {

constexpr uint64_t kFp = 0xfeed;

std::unique_ptr<Shard> CreateShard(const ShardOptions& o) {
  auto s = Shard::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

std::unique_ptr<Shard> MakeShard(ConsistencyMode mode, int workers, int staleness = 0,
                                 absl::Duration lease = absl::Seconds(30),
                                 UpdateRuleOptions rule = UpdateRuleOptions(),
                                 int backup_workers = 0) {
  ShardOptions o = SgdShard(mode, workers);
  o.update_rule = rule;
  o.consistency.backup_workers = backup_workers;
  o.consistency.staleness = staleness;
  o.lease = lease;
  return CreateShard(o);
}

// Initialises a 1-shard, 4-element slice [1, 2, 3, 4] and registers every worker.
void InitAndRegister(Shard& s, int workers) {
  const std::vector<float> init = {1, 2, 3, 4};
  ASSERT_TRUE(s.Init(kFp, 4, KeyRange{0, 4}, init).ok());
  for (int r = 0; r < workers; ++r) ASSERT_TRUE(s.Register(r, kFp).ok());
}

Shard::PushArgs PushOf(int rank, int64_t clock, int64_t base, const std::vector<float>& g) {
  Shard::PushArgs a;
  a.caller.rank = rank;
  a.fingerprint = kFp;
  a.range = KeyRange{0, 4};
  a.clock = clock;
  a.base_version = base;
  a.gradient = EncodedTensor::OfFloats(g);
  return a;
}

absl::StatusOr<Shard::PullResult> PullOf(Shard& s, int rank, int64_t clock, absl::Time deadline,
                                         std::vector<float>* out) {
  Shard::PullArgs a;
  a.caller.rank = rank;
  a.fingerprint = kFp;
  a.range = KeyRange{0, 4};
  a.clock = clock;
  out->assign(4, 0.0f);
  return s.Pull(a, deadline, absl::MakeSpan(*out));
}

TEST(Shard, BspAppliesOneMeanUpdatePerRoundWhateverTheArrivalOrder) {
  auto shard = MakeShard(ConsistencyMode::kBsp, 2);
  InitAndRegister(*shard, 2);
  auto second = shard->Push(PushOf(1, 0, 0, {2, 2, 2, 2}));
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->buffered);
  EXPECT_EQ(shard->Values(), (std::vector<float>{1, 2, 3, 4}));
  auto first = shard->Push(PushOf(0, 0, 0, {0, 4, -2, 1}));
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->applied);
  EXPECT_EQ(first->version, 1);
  // lr 1: w - (g0 + g1) / 2.
  EXPECT_EQ(shard->Values(), (std::vector<float>{0, -1, 3, 2.5}));
}

std::vector<uint32_t> BitsOf(const std::vector<float>& values) {
  std::vector<uint32_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), 4 * values.size());
  return bits;
}

// A BSP round of one gradient is applied straight from it (no sum copied first), whatever its
// encoding and pieces; the bits are those of the summed round, -0 included: the sum turns a -0
// gradient into +0, and w = -0 minus lr * (+0) stays -0 where minus lr * (-0) would give +0. ASP
// applies the same bits.
TEST(Shard, ARoundOfOneAppliesTheBitsOfASumInEveryEncodingAndMode) {
  const std::vector<float> init = {-0.0f, 2, 3, 4}, g = {-0.0f, 0.5f, -1, 2};
  const std::vector<uint32_t> expected = BitsOf({-0.0f, 1.5f, 4, 2});  // lr 1
  std::vector<uint16_t> bf16;
  for (float x : g) bf16.push_back(FloatToBf16(x));
  const char* bytes = reinterpret_cast<const char*>(bf16.data());
  // bf16 in two received slices, the first ending inside the second element.
  const std::vector<absl::Span<const char>> chunks = {{bytes, 3}, {bytes + 3, 5}};
  struct Case {
    ConsistencyMode mode;
    int workers;
    bool bf16;
  };
  for (const Case& c :
       {Case{ConsistencyMode::kBsp, 1, false}, Case{ConsistencyMode::kBsp, 1, true},
        Case{ConsistencyMode::kBsp, 2, false}, Case{ConsistencyMode::kBsp, 2, true},
        Case{ConsistencyMode::kAsp, 1, false}, Case{ConsistencyMode::kAsp, 1, true}}) {
    SCOPED_TRACE(absl::StrCat(ConsistencyModeName(c.mode), " workers ", c.workers,
                              c.bf16 ? " bf16" : " f32"));
    auto shard = MakeShard(c.mode, c.workers);
    ASSERT_TRUE(shard->Init(kFp, 4, KeyRange{0, 4}, init).ok());
    for (int r = 0; r < c.workers; ++r) ASSERT_TRUE(shard->Register(r, kFp).ok());
    for (int r = 0; r < c.workers; ++r) {  // the same gradient from each: their mean is g
      Shard::PushArgs push = PushOf(r, 0, 0, g);
      if (c.bf16) {
        auto t = EncodedTensor::FromChunks(TensorEncoding::kBf16, 4, chunks);
        ASSERT_TRUE(t.ok()) << t.status();
        push.gradient = std::move(*t);
      }
      ASSERT_TRUE(shard->Push(push).ok());
    }
    EXPECT_EQ(shard->GetStatus().version, 1);
    EXPECT_EQ(BitsOf(shard->Values()), expected);
  }
}

TEST(Shard, RejectedPushesChangeNothing) {
  auto shard = MakeShard(ConsistencyMode::kAsp, 1);
  InitAndRegister(*shard, 1);
  // PushArgs views its gradient: keep the vector alive while the args are.
  const std::vector<float> ones = {1, 1, 1, 1};
  Shard::PushArgs wrong_fp = PushOf(0, 0, 0, ones);
  wrong_fp.fingerprint = kFp + 1;
  EXPECT_EQ(shard->Push(wrong_fp).status().code(), absl::StatusCode::kFailedPrecondition);
  const std::vector<float> short_grad = {1, 1, 1};
  Shard::PushArgs wrong_len = PushOf(0, 0, 0, ones);
  wrong_len.gradient = EncodedTensor::OfFloats(short_grad);
  EXPECT_EQ(shard->Push(wrong_len).status().code(), absl::StatusCode::kInvalidArgument);
  Shard::PushArgs wrong_range = PushOf(0, 0, 0, ones);
  wrong_range.range = KeyRange{1, 5};
  EXPECT_EQ(shard->Push(wrong_range).status().code(), absl::StatusCode::kFailedPrecondition);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(shard->Push(PushOf(0, 0, 0, {1, nan, 1, 1})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard->Push(PushOf(0, 0, 0, {1, 1, INFINITY, 1})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard->Push(PushOf(0, 5, 0, {1, 1, 1, 1})).status().code(),
            absl::StatusCode::kFailedPrecondition);  // clock from the future
  EXPECT_EQ(shard->Push(PushOf(0, 0, 3, {1, 1, 1, 1})).status().code(),
            absl::StatusCode::kInvalidArgument);  // base version not yet served
  EXPECT_EQ(shard->Push(PushOf(7, 0, 0, {1, 1, 1, 1})).status().code(),
            absl::StatusCode::kInvalidArgument);  // rank out of range
  EXPECT_EQ(shard->Values(), (std::vector<float>{1, 2, 3, 4}));
  const ShardStatus st = shard->GetStatus();
  EXPECT_EQ(st.version, 0);
  EXPECT_EQ(st.rejected_nonfinite, 2);
  EXPECT_EQ(st.workers[0].clock, 0);
}

TEST(Shard, RetriedPushIsAcknowledgedAndAppliedOnce) {
  auto shard = MakeShard(ConsistencyMode::kAsp, 1);
  InitAndRegister(*shard, 1);
  auto a = shard->Push(PushOf(0, 0, 0, {1, 1, 1, 1}));
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->applied);
  auto b = shard->Push(PushOf(0, 0, 0, {1, 1, 1, 1}));
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->duplicate);
  EXPECT_FALSE(b->applied);
  EXPECT_EQ(shard->Values(), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(shard->GetStatus().version, 1);
}

TEST(Shard, StalenessIsVersionAtApplyMinusBaseVersion) {
  auto shard = MakeShard(ConsistencyMode::kAsp, 2);
  InitAndRegister(*shard, 2);
  ASSERT_TRUE(shard->Push(PushOf(0, 0, 0, {0, 0, 0, 0})).ok());
  ASSERT_TRUE(shard->Push(PushOf(0, 1, 1, {0, 0, 0, 0})).ok());
  auto late = shard->Push(PushOf(1, 0, 0, {0, 0, 0, 0}));
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(late->staleness, 2);
  const ShardStatus st = shard->GetStatus();
  EXPECT_EQ(st.workers[0].staleness.max(), 0);
  EXPECT_EQ(st.workers[1].staleness.max(), 2);
  EXPECT_EQ(st.workers[1].staleness.TrimmedCounts(), (std::vector<int64_t>{0, 0, 1}));
}

TEST(Shard, SspPullPastItsBoundTimesOutAndAspDoesNot) {
  auto ssp = MakeShard(ConsistencyMode::kSsp, 2, 1);
  InitAndRegister(*ssp, 2);
  ASSERT_TRUE(ssp->Push(PushOf(0, 0, 0, {0, 0, 0, 0})).ok());
  ASSERT_TRUE(ssp->Push(PushOf(0, 1, 1, {0, 0, 0, 0})).ok());
  std::vector<float> out;
  EXPECT_EQ(PullOf(*ssp, 0, 2, absl::Now() + absl::Milliseconds(20), &out).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(PullOf(*ssp, 0, 1, absl::InfinitePast(), &out).ok());

  auto asp = MakeShard(ConsistencyMode::kAsp, 2);
  InitAndRegister(*asp, 2);
  // A deadline already past: any wait at all would fail.
  auto r = PullOf(*asp, 0, 1000, absl::InfinitePast(), &out);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->waited, absl::ZeroDuration());
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 4}));
}

TEST(Shard, WaitingPullIsWokenByThePushThatUnblocksIt) {
  auto shard = MakeShard(ConsistencyMode::kBsp, 2);
  InitAndRegister(*shard, 2);
  ASSERT_TRUE(shard->Push(PushOf(0, 0, 0, {1, 1, 1, 1})).ok());
  absl::StatusOr<Shard::PullResult> result;
  std::vector<float> out;
  std::thread waiter([&] { result = PullOf(*shard, 0, 1, absl::Now() + absl::Seconds(30), &out); });
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_TRUE(shard->Push(PushOf(1, 0, 0, {3, 3, 3, 3})).ok());
  waiter.join();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->version, 1);
  EXPECT_EQ(out, (std::vector<float>{-1, 0, 1, 2}));
}

TEST(Shard, ExpiredLeaseLetsTheBspRoundCompleteWithoutTheSilentWorker) {
  auto shard = MakeShard(ConsistencyMode::kBsp, 2, 0, absl::Milliseconds(100));
  InitAndRegister(*shard, 2);
  std::vector<float> out;
  // Worker 0 keeps its own lease alive by pushing and pulling; worker 1 goes silent.
  ASSERT_TRUE(shard->Push(PushOf(0, 0, 0, {2, 2, 2, 2})).ok());
  auto r = PullOf(*shard, 0, 1, absl::Now() + absl::Seconds(10), &out);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(out, (std::vector<float>{-1, 0, 1, 2}));  // the mean of the one push
  const ShardStatus st = shard->GetStatus();
  EXPECT_EQ(st.workers[1].state, WorkerState::kExpired);
  EXPECT_EQ(shard->Heartbeat(Caller{1}).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(shard->Push(PushOf(1, 0, 0, {1, 1, 1, 1})).status().code(), absl::StatusCode::kAborted);
  // It returns at the open round.
  auto again = shard->Register(1, kFp);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->clock, 1);
}

// A worker that stops for good (its time budget) leaves: its lease ends at once, so the BSP round
// and the SSP pull that waited for it go on without waiting out a 30 s lease.
TEST(Shard, ALeavingWorkerEndsItsLeaseAtOnce) {
  for (ConsistencyMode mode : {ConsistencyMode::kBsp, ConsistencyMode::kSsp}) {
    SCOPED_TRACE(ConsistencyModeName(mode));
    auto shard = MakeShard(mode, 2, 0, absl::Seconds(30));
    InitAndRegister(*shard, 2);
    ASSERT_TRUE(shard->Push(PushOf(0, 0, 0, {2, 2, 2, 2})).ok());
    std::vector<float> out;
    absl::StatusOr<Shard::PullResult> held;
    std::thread waiter([&] { held = PullOf(*shard, 0, 1, absl::Now() + absl::Seconds(20), &out); });
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_TRUE(shard->Leave(Caller{1}).ok());
    waiter.join();
    ASSERT_TRUE(held.ok()) << held.status();
    // BSP: the round of the one push (its mean), lr 1; SSP: the push applied at once.
    EXPECT_EQ(out, (std::vector<float>{-1, 0, 1, 2}));
    EXPECT_EQ(shard->GetStatus().workers[1].state, WorkerState::kExpired);
    EXPECT_TRUE(shard->Leave(Caller{1}).ok());  // safe to retry
    EXPECT_EQ(shard->Heartbeat(Caller{1}).code(), absl::StatusCode::kAborted);
    auto again = shard->Register(1, kFp);  // a later Register brings the rank back
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->clock, mode == ConsistencyMode::kBsp ? 1 : 0);
  }
}

// Leave ends only the caller's own lease: not one that another process of the rank holds, nor
// one granted by an earlier incarnation of the shard.
TEST(Shard, LeaveEndsOnlyTheCallersOwnLease) {
  ShardOptions o = SgdShard(ConsistencyMode::kBsp, 2);
  o.incarnation = 9;
  o.lease = absl::Seconds(60);
  auto shard = CreateShard(o);
  const std::vector<float> init = {1, 2, 3, 4};
  ASSERT_TRUE(shard->Init(kFp, 4, KeyRange{0, 4}, init).ok());
  ASSERT_TRUE(shard->Register(1, kFp, /*incarnation=*/7).ok());
  EXPECT_EQ(shard->Leave(Caller{1, 8}).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(shard->Leave(Caller{1, 7, 8}).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(shard->Leave(Caller{2, 7}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard->GetStatus().workers[1].state, WorkerState::kLive);
  EXPECT_TRUE(shard->Leave(Caller{1, 7, 9}).ok());
  // The lease thread expires it, long before the lease would have run out.
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (shard->GetStatus().workers[1].state != WorkerState::kExpired && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(shard->GetStatus().workers[1].state, WorkerState::kExpired);
}

// Regression: an expiring lease under ASP once applied an empty "round" (0/0) and filled the
// weights with NaN.
TEST(Shard, LeaseExpiryOutsideBspChangesNoWeights) {
  for (ConsistencyMode mode : {ConsistencyMode::kAsp, ConsistencyMode::kSsp}) {
    auto shard = MakeShard(mode, 2, 1, absl::Milliseconds(50));
    InitAndRegister(*shard, 2);
    ASSERT_TRUE(shard->Push(PushOf(0, 0, 0, {1, 1, 1, 1})).ok());
    ASSERT_TRUE(shard->Push(PushOf(1, 0, 0, {1, 1, 1, 1})).ok());
    absl::SleepFor(absl::Milliseconds(300));
    const ShardStatus st = shard->GetStatus();
    EXPECT_EQ(st.workers[0].state, WorkerState::kExpired);
    EXPECT_EQ(st.workers[1].state, WorkerState::kExpired);
    EXPECT_EQ(st.version, 2);
    EXPECT_EQ(shard->Values(), (std::vector<float>{-1, 0, 1, 2}));
  }
}

TEST(Shard, ShutdownFailsTheWaitingPull) {
  auto shard = MakeShard(ConsistencyMode::kBsp, 2);
  InitAndRegister(*shard, 2);
  absl::StatusOr<Shard::PullResult> result;
  std::vector<float> out;
  std::thread waiter([&] { result = PullOf(*shard, 0, 1, absl::Now() + absl::Seconds(30), &out); });
  absl::SleepFor(absl::Milliseconds(50));
  shard->Shutdown();
  waiter.join();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
}

// Rank 0's pull of the whole test slice for step `clock`.
Shard::PullArgs PullArgsFor(int64_t clock) {
  Shard::PullArgs args;
  args.caller.rank = 0;
  args.fingerprint = kFp;
  args.range = KeyRange{0, 4};
  args.clock = clock;
  return args;
}

// PullAsync settles a waiting pull from the thread whose push unblocks it; nothing waits.
TEST(AsyncPull, SettledByThePushThatUnblocksItWithNoThreadWaiting) {
  auto shard = MakeShard(ConsistencyMode::kBsp, 2);
  InitAndRegister(*shard, 2);
  ASSERT_TRUE(shard->Push(PushOf(0, 0, 0, {1, 1, 1, 1})).ok());
  const Shard::PullArgs args = PullArgsFor(1);
  std::vector<float> read;
  int done_calls = 0;
  absl::StatusOr<Shard::PullResult> result;
  const int64_t id = shard->PullAsync(
      args, absl::Now() + absl::Seconds(30),
      [&](absl::Span<const float> v) { read.assign(v.begin(), v.end()); },
      [&](absl::StatusOr<Shard::PullResult> r) {
        result = std::move(r);
        ++done_calls;
      });
  EXPECT_NE(id, 0);
  EXPECT_EQ(done_calls, 0);
  ASSERT_TRUE(shard->Push(PushOf(1, 0, 0, {3, 3, 3, 3})).ok());
  EXPECT_EQ(done_calls, 1);  // settled inside that Push, on this thread
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->version, 1);
  EXPECT_EQ(read, (std::vector<float>{-1, 0, 1, 2}));
  shard->CancelPull(id);  // already settled: nothing happens
  EXPECT_EQ(done_calls, 1);
}

TEST(AsyncPull, ReadyPullSettlesAtOnceAndCancelledOneWithCancelled) {
  auto shard = MakeShard(ConsistencyMode::kBsp, 2);
  InitAndRegister(*shard, 2);
  Shard::PullArgs args = PullArgsFor(0);
  absl::StatusCode code = absl::StatusCode::kUnknown;
  auto record = [&](absl::StatusOr<Shard::PullResult> r) { code = r.status().code(); };
  auto ignore = [](absl::Span<const float>) {};
  EXPECT_EQ(shard->PullAsync(args, absl::Now() + absl::Seconds(30), ignore, record), 0);
  EXPECT_EQ(code, absl::StatusCode::kOk);
  args.clock = 1;  // needs round 0, which nobody pushed
  const int64_t id = shard->PullAsync(args, absl::Now() + absl::Seconds(30), ignore, record);
  ASSERT_NE(id, 0);
  shard->CancelPull(id);
  EXPECT_EQ(code, absl::StatusCode::kCancelled);
}

TEST(AsyncPull, DeadlineSettlesAWaitingPullWithoutAnyPush) {
  auto shard = MakeShard(ConsistencyMode::kBsp, 2);
  InitAndRegister(*shard, 2);
  const Shard::PullArgs args = PullArgsFor(1);
  absl::Notification settled;
  absl::StatusCode code = absl::StatusCode::kUnknown;
  ASSERT_NE(shard->PullAsync(
                args, absl::Now() + absl::Milliseconds(100), [](absl::Span<const float>) {},
                [&](absl::StatusOr<Shard::PullResult> r) {
                  code = r.status().code();
                  settled.Notify();
                }),
            0);
  ASSERT_TRUE(settled.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(code, absl::StatusCode::kDeadlineExceeded);
}

TEST(Shard, InitRules) {
  auto shard = MakeShard(ConsistencyMode::kAsp, 1);
  const std::vector<float> a = {1, 2, 3, 4};
  const std::vector<float> b = {9, 9, 9, 9};
  std::vector<float> out;
  EXPECT_EQ(PullOf(*shard, 0, 0, absl::InfinitePast(), &out).status().code(),
            absl::StatusCode::kFailedPrecondition);  // not initialised
  EXPECT_EQ(shard->Init(kFp, 4, KeyRange{0, 3}, {1, 2, 3}).status().code(),
            absl::StatusCode::kFailedPrecondition);  // not this shard's range
  EXPECT_EQ(shard->Init(kFp, 4, KeyRange{0, 4}, {1, 2, 3}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto first = shard->Init(kFp, 4, KeyRange{0, 4}, a);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->already_initialized);
  auto second = shard->Init(kFp, 4, KeyRange{0, 4}, b);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->already_initialized);
  EXPECT_EQ(shard->Init(kFp + 1, 4, KeyRange{0, 4}, b).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(shard->Register(0, kFp + 1).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(shard->Values(), a);
  EXPECT_EQ(shard->Heartbeat(Caller{0}).code(), absl::StatusCode::kNotFound);
}

// Three workers, one of them slow, each pulling step c and pushing it with the version it read.
// No applied gradient may be staler than (W-1)(2s+1).
TEST(Shard, SspStalenessStaysWithinTheBoundUnderConcurrency) {
  const int workers = 3;
  const int s = 1;
  auto shard = MakeShard(ConsistencyMode::kSsp, workers, s);
  InitAndRegister(*shard, workers);
  std::vector<std::thread> threads;
  std::vector<absl::Status> errors(workers);
  for (int r = 0; r < workers; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> out;
      for (int c = 0; c < 30; ++c) {
        auto pulled = PullOf(*shard, r, c, absl::Now() + absl::Seconds(30), &out);
        if (!pulled.ok()) {
          errors[r] = pulled.status();
          return;
        }
        absl::SleepFor(absl::Microseconds(r == 1 ? 3000 : 200));
        auto pushed = shard->Push(PushOf(r, c, pulled->version, {0.01f, 0, 0, 0}));
        if (!pushed.ok()) {
          errors[r] = pushed.status();
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) EXPECT_TRUE(e.ok()) << e;
  const ShardStatus st = shard->GetStatus();
  EXPECT_EQ(st.version, workers * 30);
  int64_t max_staleness = 0;
  for (const auto& w : st.workers) max_staleness = std::max(max_staleness, w.staleness.max());
  EXPECT_LE(max_staleness, (workers - 1) * (2 * s + 1));
  EXPECT_GT(max_staleness, 0);  // the run really was asynchronous
}

std::unique_ptr<Shard> MakeRuleShard(UpdateRule rule, float lambda = 0.04f,
                                     int64_t drop_above = 4) {
  UpdateRuleOptions r;
  r.rule = rule;
  r.dc_lambda = lambda;
  r.drop_above = drop_above;
  return MakeShard(ConsistencyMode::kAsp, 2, 0, absl::Seconds(30), r);
}

TEST(UpdateRules, StalenessLrDividesTheStepByStalenessPlusOne) {
  auto shard = MakeRuleShard(UpdateRule::kStalenessLr);
  InitAndRegister(*shard, 2);
  ASSERT_TRUE(shard->Push(PushOf(0, 0, 0, {1, 1, 1, 1})).ok());  // fresh: lr 1
  auto stale = shard->Push(PushOf(1, 0, 0, {2, 2, 2, 2}));       // staleness 1: lr 1/2
  ASSERT_TRUE(stale.ok());
  EXPECT_EQ(stale->staleness, 1);
  EXPECT_EQ(shard->Values(), (std::vector<float>{-1, 0, 1, 2}));
}

TEST(UpdateRules, DcAsgdCompensatesForTheWeightsMovedSinceThePull) {
  auto shard = MakeRuleShard(UpdateRule::kDcAsgd, /*lambda=*/0.5f);
  InitAndRegister(*shard, 2);
  std::vector<float> out;
  ASSERT_TRUE(PullOf(*shard, 1, 0, absl::InfinitePast(), &out).ok());  // worker 1 reads 1,2,3,4
  ASSERT_TRUE(PullOf(*shard, 0, 0, absl::InfinitePast(), &out).ok());
  ASSERT_TRUE(shard->Push(PushOf(0, 0, 0, {1, 1, 1, 1})).ok());  // no drift yet: plain step
  EXPECT_EQ(shard->Values(), (std::vector<float>{0, 1, 2, 3}));
  // Worker 1's gradient 2 was computed at 1,2,3,4; the weights moved by -1 since:
  // 2 + 0.5 * 2^2 * (-1) = 0, so nothing moves.
  ASSERT_TRUE(shard->Push(PushOf(1, 0, 0, {2, 2, 2, 2})).ok());
  EXPECT_EQ(shard->Values(), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(shard->GetStatus().version, 2);
}

TEST(UpdateRules, DropRefusesGradientsStalerThanTheBoundAndCountsThem) {
  auto shard = MakeRuleShard(UpdateRule::kDropStale, 0.04f, /*drop_above=*/0);
  InitAndRegister(*shard, 2);
  ASSERT_TRUE(shard->Push(PushOf(0, 0, 0, {1, 1, 1, 1})).ok());
  auto dropped = shard->Push(PushOf(1, 0, 0, {5, 5, 5, 5}));
  ASSERT_TRUE(dropped.ok());
  EXPECT_TRUE(dropped->dropped);
  EXPECT_FALSE(dropped->applied);
  EXPECT_EQ(shard->Values(), (std::vector<float>{0, 1, 2, 3}));
  const ShardStatus st = shard->GetStatus();
  EXPECT_EQ(st.version, 1);
  EXPECT_EQ(st.workers[1].dropped, 1);
  EXPECT_EQ(st.workers[1].clock, 1);  // the worker moves on
  auto fresh = shard->Push(PushOf(1, 1, 1, {1, 1, 1, 1}));
  ASSERT_TRUE(fresh.ok());
  EXPECT_TRUE(fresh->applied);
}

TEST(BackupWorkers, RoundAppliesWithoutTheSlowestAndItsLatePushIsCountedNotApplied) {
  auto shard = MakeShard(ConsistencyMode::kBsp, 3, 0, absl::Seconds(30), UpdateRuleOptions(),
                         /*backup_workers=*/1);
  const std::vector<float> init = {1, 2, 3, 4};
  ASSERT_TRUE(shard->Init(kFp, 4, KeyRange{0, 4}, init).ok());
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(shard->Register(r, kFp).ok());
  ASSERT_TRUE(shard->Push(PushOf(0, 0, 0, {2, 2, 2, 2})).ok());
  auto second = shard->Push(PushOf(1, 0, 0, {4, 4, 4, 4}));
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->applied);  // 2 of 3 pushed: the round is applied with their mean
  EXPECT_EQ(shard->Values(), (std::vector<float>{-2, -1, 0, 1}));
  auto late = shard->Push(PushOf(2, 0, 0, {100, 100, 100, 100}));
  ASSERT_TRUE(late.ok());
  EXPECT_TRUE(late->late);
  EXPECT_FALSE(late->applied);
  EXPECT_EQ(shard->Values(), (std::vector<float>{-2, -1, 0, 1}));
  const ShardStatus st = shard->GetStatus();
  EXPECT_EQ(st.version, 1);
  EXPECT_EQ(st.workers[2].late, 1);
  EXPECT_EQ(st.workers[2].clock, 1);
  // The late worker takes part in the next round like the others.
  ASSERT_TRUE(shard->Push(PushOf(2, 1, 1, {1, 1, 1, 1})).ok());
  ASSERT_TRUE(shard->Push(PushOf(0, 1, 1, {3, 3, 3, 3})).ok());
  EXPECT_EQ(shard->Values(), (std::vector<float>{-4, -3, -2, -1}));
}

TEST(BackupWorkers, OnlyForBsp) {
  ShardOptions o;
  o.consistency.mode = ConsistencyMode::kSsp;
  o.consistency.num_workers = 3;
  o.consistency.backup_workers = 1;
  EXPECT_EQ(Shard::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.consistency.mode = ConsistencyMode::kBsp;
  o.consistency.backup_workers = 3;
  EXPECT_EQ(Shard::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

// A shard with optimizer `kind` (lr 0.1) and a given incarnation.
std::unique_ptr<Shard> MakeOptimizerShard(OptimizerKind kind, ConsistencyMode mode, int workers,
                                          uint64_t incarnation) {
  ShardOptions o;
  o.consistency.mode = mode;
  o.consistency.num_workers = workers;
  o.optimizer.kind = kind;
  o.optimizer.lr = 0.1f;
  o.incarnation = incarnation;
  return CreateShard(o);
}
std::unique_ptr<Shard> MakeAdamShard(ConsistencyMode mode, int workers, uint64_t incarnation = 1) {
  return MakeOptimizerShard(OptimizerKind::kAdam, mode, workers, incarnation);
}

TEST(Incarnations, AReplacedWorkerProcessAndAStaleShardIncarnationGetAborted) {
  auto shard = MakeAdamShard(ConsistencyMode::kAsp, 2, /*incarnation=*/77);
  ASSERT_TRUE(shard->Init(kFp, 4, KeyRange{0, 4}, {1, 2, 3, 4}).ok());
  ASSERT_TRUE(shard->Register(0, kFp, /*incarnation=*/100).ok());
  const std::vector<float> ones = {1, 1, 1, 1};  // outlives `push`, which views it
  Shard::PushArgs push = PushOf(0, 0, 0, ones);
  push.caller.incarnation = 100;
  push.caller.shard_incarnation = 77;
  ASSERT_TRUE(shard->Push(push).ok());
  // The process restarts at the same rank: the old one's late push is refused.
  ASSERT_TRUE(shard->Register(0, kFp, /*incarnation=*/200).ok());
  push.clock = 1;
  push.base_version = 1;
  EXPECT_EQ(shard->Push(push).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(shard->Heartbeat(Caller{0, 100, 77}).code(), absl::StatusCode::kAborted);
  // A call meant for an earlier process of this shard is refused too.
  push.caller.incarnation = 200;
  push.caller.shard_incarnation = 76;
  EXPECT_EQ(shard->Push(push).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(shard->GetStatus().version, 1);
  push.caller.shard_incarnation = 77;
  EXPECT_TRUE(shard->Push(push).ok());
  EXPECT_EQ(shard->GetStatus().version, 2);
}

TEST(ExactlyOnce, ARetriedPushIsAcknowledgedNotAppliedAndCounted) {
  auto shard = MakeShard(ConsistencyMode::kAsp, 1);
  InitAndRegister(*shard, 1);
  ASSERT_TRUE(shard->Push(PushOf(0, 0, 0, {1, 1, 1, 1})).ok());
  auto again = shard->Push(PushOf(0, 0, 0, {1, 1, 1, 1}));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate);
  EXPECT_FALSE(again->applied);
  const ShardStatus st = shard->GetStatus();
  EXPECT_EQ(st.version, 1);
  EXPECT_EQ(st.pushes_accepted, 1);
  EXPECT_EQ(st.pushes_duplicate, 1);
  EXPECT_EQ(shard->Values(), (std::vector<float>{0, 1, 2, 3}));
}

// A snapshot taken mid-round (one BSP gradient buffered, the optimizer's state, if any, non-zero:
// Adam's moments, AdaGrad's sums of squares) and restored into a fresh shard continues exactly as
// the original, for every optimizer: same weights, bit for bit.
class SnapshotOfEveryOptimizer : public ::testing::TestWithParam<OptimizerKind> {};

TEST_P(SnapshotOfEveryOptimizer, RestoredShardContinuesBitForBit) {
  auto original = MakeOptimizerShard(GetParam(), ConsistencyMode::kBsp, 2, 1);
  ASSERT_TRUE(original->Init(kFp, 4, KeyRange{0, 4}, {1, 2, 3, 4}).ok());
  ASSERT_TRUE(original->Register(0, kFp, 11).ok());
  ASSERT_TRUE(original->Register(1, kFp, 12).ok());
  ASSERT_TRUE(original->Push(PushOf(0, 0, 0, {0.5f, -1, 2, 0.25f})).ok());
  ASSERT_TRUE(original->Push(PushOf(1, 0, 0, {0.1f, 0.2f, -0.3f, 4})).ok());
  ASSERT_TRUE(original->Push(PushOf(0, 1, 1, {1, 1, -1, -1})).ok());  // buffered
  const Shard::Snapshot snapshot = original->EncodeSnapshot();
  EXPECT_EQ(snapshot.version, 1);

  auto restored = MakeOptimizerShard(GetParam(), ConsistencyMode::kBsp, 2, /*incarnation=*/2);
  ASSERT_TRUE(restored->RestoreSnapshot(snapshot.payload).ok());
  const ShardStatus st = restored->GetStatus();
  EXPECT_EQ(st.version, 1);
  EXPECT_EQ(st.restored_version, 1);
  EXPECT_EQ(st.workers[0].clock, 2);
  EXPECT_EQ(st.workers[1].clock, 1);
  EXPECT_EQ(st.workers[0].state, WorkerState::kLive);
  EXPECT_EQ(st.workers[0].staleness.count(), 1);
  EXPECT_EQ(restored->Values(), original->Values());
  // The buffered push survived: it is a duplicate now, and worker 1's push completes the round.
  EXPECT_TRUE(restored->Push(PushOf(0, 1, 1, {1, 1, -1, -1}))->duplicate);
  for (Shard* s : {original.get(), restored.get()}) {
    auto r = s->Push(PushOf(1, 1, 1, {-2, 0.5f, 0.5f, 1}));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->applied);
  }
  EXPECT_EQ(restored->Values(), original->Values());
  EXPECT_EQ(restored->GetStatus().version, 2);
}
INSTANTIATE_TEST_SUITE_P(Kinds, SnapshotOfEveryOptimizer, ::testing::ValuesIn(AllOptimizerKinds()),
                         [](const auto& info) { return OptimizerKindName(info.param); });

// Work conservation: the plan a worker declares, the BSP rounds applied without it, and both
// through a snapshot; a restored snapshot of a finished job says so.
TEST(WorkPlans, DeclaredPlansAndSkippedRoundsAreReportedAndSurviveASnapshot) {
  auto shard = MakeShard(ConsistencyMode::kBsp, 2, 0, absl::Milliseconds(100));
  ASSERT_TRUE(shard->Init(kFp, 4, KeyRange{0, 4}, {1, 2, 3, 4}).ok());
  ASSERT_TRUE(shard->Register(0, kFp, 0, WorkPlan{3, 32}).ok());
  ASSERT_TRUE(shard->Register(1, kFp).ok());
  ASSERT_TRUE(shard->Heartbeat(Caller{1}, WorkPlan{3, 32}).ok());
  EXPECT_EQ(shard->Register(0, kFp, 0, WorkPlan{-1, 32}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard->Heartbeat(Caller{1}, WorkPlan{3, -2}).code(),
            absl::StatusCode::kInvalidArgument);
  // Worker 1 goes silent; worker 0 trains rounds 0 and 1 alone once the lease has expired.
  std::vector<float> out;
  for (int64_t clock = 0; clock < 2; ++clock) {
    auto pushed = shard->Push(PushOf(0, clock, clock, {1, 1, 1, 1}));
    ASSERT_TRUE(pushed.ok()) << pushed.status();
    ASSERT_TRUE(PullOf(*shard, 0, clock + 1, absl::Now() + absl::Seconds(10), &out).ok());
    // Its own lease may have run out while the pull waited for worker 1's: a renewal at its
    // clock (the open round) skips nothing.
    ASSERT_TRUE(shard->Register(0, kFp).ok());
  }
  auto back = shard->Register(1, kFp);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->clock, 2);
  ShardStatus st = shard->GetStatus();
  EXPECT_EQ(st.workers[0].plan.steps, 3);
  EXPECT_EQ(st.workers[0].plan.samples_per_step, 32);
  EXPECT_EQ(st.workers[1].plan.steps, 3);
  EXPECT_EQ(st.workers[0].skipped_steps, 0);
  EXPECT_EQ(st.workers[1].skipped_steps, 2);
  EXPECT_EQ(st.workers[0].staleness.count(), 2);
  EXPECT_EQ(st.workers[1].staleness.count(), 0);
  // The last round with both; the job is finished, and a shard restoring it knows.
  ASSERT_TRUE(shard->Push(PushOf(0, 2, 2, {1, 1, 1, 1})).ok());
  ASSERT_TRUE(shard->Push(PushOf(1, 2, 2, {1, 1, 1, 1}))->applied);
  const Shard::Snapshot finished = shard->EncodeSnapshot();
  EXPECT_FALSE(shard->GetStatus().finished_at_restore);
  auto restored = MakeShard(ConsistencyMode::kBsp, 2);
  ASSERT_TRUE(restored->RestoreSnapshot(finished.payload).ok());
  st = restored->GetStatus();
  EXPECT_TRUE(st.finished_at_restore);
  EXPECT_EQ(st.workers[1].skipped_steps, 2);
  EXPECT_EQ(st.workers[1].plan.steps, 3);
  EXPECT_EQ(st.workers[1].plan.samples_per_step, 32);
  EXPECT_EQ(st.workers[1].staleness.count(), 1);
}

TEST(WorkPlans, ASnapshotOfAnUnfinishedJobIsNotFinishedAtRestore) {
  auto shard = MakeShard(ConsistencyMode::kAsp, 2);
  ASSERT_TRUE(shard->Init(kFp, 4, KeyRange{0, 4}, {1, 2, 3, 4}).ok());
  ASSERT_TRUE(shard->Register(0, kFp, 0, WorkPlan{1, 8}).ok());
  ASSERT_TRUE(shard->Register(1, kFp, 0, WorkPlan{1, 8}).ok());
  ASSERT_TRUE(shard->Push(PushOf(0, 0, 0, {1, 1, 1, 1})).ok());  // rank 1 still owes its step
  auto restored = MakeShard(ConsistencyMode::kAsp, 2);
  ASSERT_TRUE(restored->RestoreSnapshot(shard->EncodeSnapshot().payload).ok());
  EXPECT_FALSE(restored->GetStatus().finished_at_restore);
}

// A new worker process over a finished job is flagged (its result would be the old one) until
// an update is applied again (a run that declares more steps and trains them).
TEST(WorkPlans, ANewWorkerOverAFinishedJobIsFlaggedUntilTrainingResumes) {
  auto shard = MakeShard(ConsistencyMode::kAsp, 1);
  ASSERT_TRUE(shard->Init(kFp, 4, KeyRange{0, 4}, {1, 2, 3, 4}).ok());
  auto first = shard->Register(0, kFp, /*incarnation=*/7, WorkPlan{1, 8});
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->job_finished);
  ASSERT_TRUE(shard->Push(PushOf(0, 0, 0, {1, 1, 1, 1})).ok());
  // The same process registering again is no rerun.
  auto same = shard->Register(0, kFp, 7);
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(same->job_finished);
  EXPECT_FALSE(shard->GetStatus().finished_job_rerun);
  auto rerun = shard->Register(0, kFp, /*incarnation=*/8);
  ASSERT_TRUE(rerun.ok());
  EXPECT_TRUE(rerun->job_finished);
  EXPECT_EQ(rerun->clock, 1);
  EXPECT_TRUE(shard->GetStatus().finished_job_rerun);
  // It declares a longer run and trains on: the result is new again.
  ASSERT_TRUE(shard->Heartbeat(Caller{0, 8}, WorkPlan{2, 8}).ok());
  const std::vector<float> gradient = {1, 1, 1, 1};  // borrowed by the push below
  Shard::PushArgs more = PushOf(0, 1, 1, gradient);
  more.caller.incarnation = 8;
  ASSERT_TRUE(shard->Push(more).ok());
  EXPECT_FALSE(shard->GetStatus().finished_job_rerun);
}

// --lr_schedule cosine with no --decay_updates: the shard ends the decay at the run's last
// update, known from the first declared plan (BSP: one update per step; ASP: one per push).
TEST(WorkPlans, AnAutomaticCosineScheduleEndsAtTheDeclaredRunsLastUpdate) {
  for (ConsistencyMode mode : {ConsistencyMode::kBsp, ConsistencyMode::kAsp}) {
    ShardOptions o = SgdShard(mode, 2);
    o.optimizer.schedule = LrSchedule::kCosine;
    auto shard = CreateShard(o);
    ASSERT_TRUE(shard->Init(kFp, 4, KeyRange{0, 4}, {0, 0, 0, 0}).ok());
    EXPECT_EQ(shard->GetStatus().decay_updates, 0);
    ASSERT_TRUE(shard->Register(0, kFp, 0, WorkPlan{2, 16}).ok());
    ASSERT_TRUE(shard->Register(1, kFp, 0, WorkPlan{2, 16}).ok());
    const int64_t decay = mode == ConsistencyMode::kBsp ? 2 : 4;
    EXPECT_EQ(shard->GetStatus().decay_updates, decay);
    // The first update runs at the peak rate, the one halfway at half of it (BSP: a round of
    // two gradients of 1 is one update of 1; ASP: each push is one).
    ASSERT_TRUE(shard->Push(PushOf(0, 0, 0, {1, 1, 1, 1})).ok());
    ASSERT_TRUE(shard->Push(PushOf(1, 0, 0, {1, 1, 1, 1})).ok());
    const std::vector<float> after = shard->Values();
    const float expected =
        mode == ConsistencyMode::kBsp ? -1.0f : -1.0f - 0.5f * (1 + std::cos(M_PI / 4));
    EXPECT_NEAR(after[0], expected, 1e-6) << ConsistencyModeName(mode);
  }
}

TEST(Snapshot, RefusesAnotherConfigurationAShardInUseAndEveryTruncation) {
  auto original = MakeAdamShard(ConsistencyMode::kBsp, 2);
  ASSERT_TRUE(original->Init(kFp, 4, KeyRange{0, 4}, {1, 2, 3, 4}).ok());
  ASSERT_TRUE(original->Register(0, kFp).ok());
  const std::string payload = original->EncodeSnapshot().payload;

  EXPECT_EQ(MakeAdamShard(ConsistencyMode::kAsp, 2)->RestoreSnapshot(payload).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(MakeAdamShard(ConsistencyMode::kBsp, 3)->RestoreSnapshot(payload).code(),
            absl::StatusCode::kFailedPrecondition);
  auto in_use = MakeAdamShard(ConsistencyMode::kBsp, 2);
  ASSERT_TRUE(in_use->Register(1, kFp).ok());
  EXPECT_EQ(in_use->RestoreSnapshot(payload).code(), absl::StatusCode::kFailedPrecondition);

  for (size_t n = 0; n < payload.size(); ++n) {
    auto fresh = MakeAdamShard(ConsistencyMode::kBsp, 2);
    EXPECT_EQ(fresh->RestoreSnapshot(payload.substr(0, n)).code(), absl::StatusCode::kDataLoss)
        << n;
    const ShardStatus st = fresh->GetStatus();
    EXPECT_FALSE(st.initialized);
    EXPECT_EQ(st.restored_version, -1);
  }
  EXPECT_EQ(MakeAdamShard(ConsistencyMode::kBsp, 2)->RestoreSnapshot(payload + "x").code(),
            absl::StatusCode::kDataLoss);
}

TEST(Snapshot, BspSnapshotsAtEveryNthRoundAtTheExactVersion) {
  ShardOptions o;
  o.consistency.mode = ConsistencyMode::kBsp;
  o.consistency.num_workers = 2;
  o.optimizer.kind = OptimizerKind::kSgd;
  o.snapshot_every_updates = 2;
  std::vector<int64_t> versions;
  o.on_snapshot = [&versions](ShardSnapshot snapshot) {
    EXPECT_FALSE(snapshot.payload.empty());
    EXPECT_EQ(snapshot.base_version, -1);  // a dense model's are all full
    versions.push_back(snapshot.version);
  };
  auto shard = CreateShard(o);
  InitAndRegister(*shard, 2);
  for (int64_t c = 0; c < 5; ++c) {
    ASSERT_TRUE(shard->Push(PushOf(0, c, c, {1, 1, 1, 1})).ok());
    ASSERT_TRUE(shard->Push(PushOf(1, c, c, {1, 1, 1, 1})).ok());
  }
  EXPECT_EQ(versions, (std::vector<int64_t>{2, 4}));
}

// Priority scheduling: a worker pushes its clock in pieces as backward produces them.
Shard::PushArgs PieceOf(int rank, int64_t clock, int64_t base, KeyRange range,
                        const std::vector<float>& g) {
  Shard::PushArgs a = PushOf(rank, clock, base, g);
  a.range = range;
  return a;
}

TEST(Pieces, ABspRoundOfPiecesEqualsOneOfWholePushesBitForBit) {
  auto whole = MakeShard(ConsistencyMode::kBsp, 2);
  auto pieces = MakeShard(ConsistencyMode::kBsp, 2);
  InitAndRegister(*whole, 2);
  InitAndRegister(*pieces, 2);
  const std::vector<float> g0 = {0.5f, 4, -2, 1}, g1 = {2, 2, 2, 0.25f};
  ASSERT_TRUE(whole->Push(PushOf(0, 0, 0, g0)).ok());
  ASSERT_TRUE(whole->Push(PushOf(1, 0, 0, g1)).ok());
  // Last layer first: [3, 4), then [0, 3); worker 1 pushes whole.
  const std::vector<float> tail = {g0[3]}, head = {g0[0], g0[1], g0[2]};
  auto first = pieces->Push(PieceOf(0, 0, 0, KeyRange{3, 4}, tail));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->staged);
  EXPECT_FALSE(first->buffered || first->applied || first->duplicate);
  auto completing = pieces->Push(PieceOf(0, 0, 0, KeyRange{0, 3}, head));
  ASSERT_TRUE(completing.ok()) << completing.status();
  EXPECT_FALSE(completing->staged);
  EXPECT_TRUE(completing->buffered);  // the whole clock went on, into the BSP round
  EXPECT_EQ(pieces->GetStatus().version, 0);
  auto other = pieces->Push(PushOf(1, 0, 0, g1));
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->applied);
  EXPECT_EQ(pieces->Values(), whole->Values());
  EXPECT_EQ(pieces->GetStatus().pushes_accepted, 2);
}

TEST(Pieces, BspPiecesFillTheRoundBufferOverRoundsWhicheverPushCompletesTheRound) {
  auto whole = MakeShard(ConsistencyMode::kBsp, 2);
  auto pieces = MakeShard(ConsistencyMode::kBsp, 2);
  InitAndRegister(*whole, 2);
  InitAndRegister(*pieces, 2);
  for (int64_t c = 0; c < 4; ++c) {
    const float f = static_cast<float>(c + 1);
    const std::vector<float> g0 = {0.5f * f, -f, 3, 0.125f}, g1 = {f, 2, -0.25f * f, 1};
    ASSERT_TRUE(whole->Push(PushOf(0, c, c, g0)).ok());
    ASSERT_TRUE(whole->Push(PushOf(1, c, c, g1)).ok());
    // Even rounds: worker 0's pieces complete the round; odd ones: worker 1's whole push does.
    if (c % 2 == 0) {
      ASSERT_TRUE(pieces->Push(PushOf(1, c, c, g1)).ok());
    }
    const std::vector<float> head = {g0[0], g0[1]}, tail = {g0[2], g0[3]};
    ASSERT_TRUE(pieces->Push(PieceOf(0, c, c, KeyRange{2, 4}, tail)).ok());
    auto last = pieces->Push(PieceOf(0, c, c, KeyRange{0, 2}, head));
    ASSERT_TRUE(last.ok()) << last.status();
    EXPECT_EQ(last->applied, c % 2 == 0);
    EXPECT_EQ(last->buffered, c % 2 == 1);
    if (c % 2 == 1) {
      ASSERT_TRUE(pieces->Push(PushOf(1, c, c, g1)).ok());
    }
    ASSERT_EQ(pieces->Values(), whole->Values()) << "round " << c;
  }
  const ShardStatus st = pieces->GetStatus();
  EXPECT_EQ(st.version, 4);
  EXPECT_EQ(st.pieces_received, 8);
  EXPECT_EQ(st.staging_bytes, 0);  // gathered in worker 0's round buffer, no slice of their own
}

TEST(Pieces, RepeatedPieceIsADuplicateOverlappingOneIsRefusedAndLateOnesAfterTheClockToo) {
  auto shard = MakeShard(ConsistencyMode::kAsp, 1);
  InitAndRegister(*shard, 1);
  const std::vector<float> two = {1, 1}, three = {1, 1, 1};
  ASSERT_TRUE(shard->Push(PieceOf(0, 0, 0, KeyRange{0, 2}, two)).ok());
  auto again = shard->Push(PieceOf(0, 0, 0, KeyRange{0, 2}, two));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate && again->staged);
  EXPECT_EQ(shard->Push(PieceOf(0, 0, 0, KeyRange{1, 4}, three)).status().code(),
            absl::StatusCode::kInvalidArgument);  // overlaps [0, 2)
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> bad = {1, nan};
  EXPECT_EQ(shard->Push(PieceOf(0, 0, 0, KeyRange{2, 4}, bad)).status().code(),
            absl::StatusCode::kInvalidArgument);  // refused before it is staged
  EXPECT_EQ(shard->Values(), (std::vector<float>{1, 2, 3, 4}));
  const std::vector<float> rest = {2, 2};
  auto done = shard->Push(PieceOf(0, 0, 0, KeyRange{2, 4}, rest));
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done->applied);
  EXPECT_EQ(shard->Values(), (std::vector<float>{0, 1, 1, 2}));
  // Once the clock is applied, any piece of it (a retry whose reply was lost) is a duplicate.
  auto late = shard->Push(PieceOf(0, 0, 0, KeyRange{2, 4}, rest));
  ASSERT_TRUE(late.ok());
  EXPECT_TRUE(late->duplicate);
  EXPECT_FALSE(late->staged);
  EXPECT_EQ(shard->Values(), (std::vector<float>{0, 1, 1, 2}));
  const ShardStatus st = shard->GetStatus();
  EXPECT_EQ(st.version, 1);
  EXPECT_EQ(st.pushes_accepted, 1);
  EXPECT_EQ(st.pushes_duplicate, 2);
  EXPECT_EQ(st.rejected_nonfinite, 1);
  EXPECT_EQ(st.staging_bytes, 4 * static_cast<int64_t>(sizeof(float)));  // ASP: a slice staged
}

TEST(Pieces, StalenessCountsFromTheOldestPieceAndAPartialPullReadsItsRange) {
  auto shard = MakeShard(ConsistencyMode::kAsp, 2);
  InitAndRegister(*shard, 2);
  const std::vector<float> ones = {1, 1, 1, 1}, two = {1, 1};
  ASSERT_TRUE(shard->Push(PushOf(1, 0, 0, ones)).ok());  // version 1
  ASSERT_TRUE(shard->Push(PieceOf(0, 0, 0, KeyRange{0, 2}, two)).ok());
  auto done = shard->Push(PieceOf(0, 0, 1, KeyRange{2, 4}, two));
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done->applied);
  EXPECT_EQ(done->staleness, 1);  // version 1 at apply, oldest piece based on version 0
  Shard::PullArgs a;
  a.caller.rank = 0;
  a.fingerprint = kFp;
  a.range = KeyRange{1, 3};
  a.clock = 1;
  std::vector<float> out(2);
  auto r = shard->Pull(a, absl::InfiniteFuture(), absl::MakeSpan(out));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->version, 2);
  EXPECT_EQ(out, (std::vector<float>{0, 1}));  // [-1, 0, 1, 2] at keys 1 and 2
  a.range = KeyRange{3, 5};                    // beyond the slice
  EXPECT_EQ(shard->Pull(a, absl::InfiniteFuture(), absl::MakeSpan(out)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(Pieces, ARegisteringProcessDiscardsThePiecesOfTheOneItReplaces) {
  auto shard = MakeShard(ConsistencyMode::kAsp, 1);
  const std::vector<float> init = {1, 2, 3, 4};
  ASSERT_TRUE(shard->Init(kFp, 4, KeyRange{0, 4}, init).ok());
  ASSERT_TRUE(shard->Register(0, kFp, /*incarnation=*/11).ok());
  const std::vector<float> old_piece = {100, 100}, new_piece = {1, 1};
  Shard::PushArgs stale = PieceOf(0, 0, 0, KeyRange{0, 2}, old_piece);
  stale.caller.incarnation = 11;
  ASSERT_TRUE(shard->Push(stale).ok());
  ASSERT_TRUE(shard->Register(0, kFp, /*incarnation=*/22).ok());
  for (const KeyRange range : {KeyRange{0, 2}, KeyRange{2, 4}}) {
    Shard::PushArgs fresh = PieceOf(0, 0, 0, range, new_piece);
    fresh.caller.incarnation = 22;
    auto r = shard->Push(fresh);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->duplicate);
  }
  EXPECT_EQ(shard->Values(), (std::vector<float>{0, 1, 2, 3}));
}

TEST(LendableValues, WritesInPlaceWhileNothingIsLent) {
  LendableValues v;
  v.Assign({1, 2, 3});
  const float* before = v.view().data();
  v.Mutable()[0] = 7;
  EXPECT_EQ(v.view().data(), before);
  EXPECT_EQ(v.values(), (std::vector<float>{7, 2, 3}));
  { LendableValues::Loan ended = v.Lend(); }
  v.Mutable()[1] = 8;
  EXPECT_EQ(v.view().data(), before);
  EXPECT_EQ(v.copies_on_write(), 0);
}

TEST(LendableValues, ALentBufferIsNeverWrittenAndTheSpareIsReusedOnceReturned) {
  LendableValues v;
  v.Assign({1, 2, 3});
  LendableValues::Loan first = v.Lend();
  v.Mutable()[0] = 7;  // copies: the loan keeps the old values
  EXPECT_EQ(*first, (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(v.values(), (std::vector<float>{7, 2, 3}));
  EXPECT_NE(v.view().data(), first->data());
  EXPECT_EQ(v.copies_on_write(), 1);
  const float* first_buffer = first->data();
  LendableValues::Loan second = v.Lend();
  first.reset();       // the spare is free again
  v.Mutable()[1] = 8;  // copies into the spare, not into a fresh buffer
  EXPECT_EQ(v.view().data(), first_buffer);
  EXPECT_EQ(*second, (std::vector<float>{7, 2, 3}));
  EXPECT_EQ(v.values(), (std::vector<float>{7, 8, 3}));
  LendableValues::Loan third = v.Lend();
  v.Mutable()[2] = 9;  // both buffers lent: a fresh one
  EXPECT_EQ(*second, (std::vector<float>{7, 2, 3}));
  EXPECT_EQ(*third, (std::vector<float>{7, 8, 3}));
  EXPECT_EQ(v.values(), (std::vector<float>{7, 8, 9}));
  EXPECT_EQ(v.copies_on_write(), 3);
  // Assigning over a lent buffer leaves the loan alone too.
  v.Assign({5});
  EXPECT_EQ(*third, (std::vector<float>{7, 8, 3}));
  EXPECT_EQ(v.values(), (std::vector<float>{5}));
}

TEST(Shard, APullsLoanKeepsTheValuesItReadWhilePushesGoOn) {
  auto shard = MakeShard(ConsistencyMode::kAsp, 1);
  InitAndRegister(*shard, 1);
  Shard::PullArgs a;
  a.caller.rank = 0;
  a.fingerprint = kFp;
  a.range = KeyRange{1, 3};
  a.lend = true;
  absl::Span<const float> read;
  auto pulled = shard->Pull(a, absl::InfiniteFuture(),
                            [&](absl::Span<const float> values) { read = values; });
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  ASSERT_NE(pulled->loan, nullptr);
  ASSERT_TRUE(shard->Push(PushOf(0, 0, 0, {1, 1, 1, 1})).ok());  // lr 1
  EXPECT_EQ(shard->Values(), (std::vector<float>{0, 1, 2, 3}));
  // The span the reader saw lies in the loan and still holds the values of the pull.
  EXPECT_EQ(std::vector<float>(read.begin(), read.end()), (std::vector<float>{2, 3}));
  EXPECT_GE(read.data(), pulled->loan->data());
  EXPECT_LE(read.data() + read.size(), pulled->loan->data() + pulled->loan->size());
  a.lend = false;
  auto plain = shard->Pull(a, absl::InfiniteFuture(), [](absl::Span<const float>) {});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->loan, nullptr);
}

}  // namespace
}  // namespace ps
