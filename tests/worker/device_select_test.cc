#include "worker/device_select.h"

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(CreateDevice, CpuAlwaysWorks) {
  auto dev = CreateDevice("cpu");
  ASSERT_TRUE(dev.ok());
  EXPECT_EQ((*dev)->name(), "cpu");
}

TEST(CreateDevice, RejectsUnknownSpellings) {
  for (const char* spec : {"", "gpu", "tpu", "cuda:", "cuda:x", "cuda:-1", "CPU", "cuda0"}) {
    EXPECT_EQ(CreateDevice(spec).status().code(), absl::StatusCode::kInvalidArgument) << spec;
  }
}

TEST(CreateDevice, CudaIsAClearErrorWithoutACudaBuildOrAGpu) {
  auto dev = CreateDevice("cuda:0");
  if (dev.ok()) {
    EXPECT_TRUE(BuiltWithCuda());
    EXPECT_EQ((*dev)->name(), "cuda:0");
    return;
  }
  EXPECT_EQ(dev.status().code(), absl::StatusCode::kFailedPrecondition) << dev.status();
  if (!BuiltWithCuda()) {
    EXPECT_NE(dev.status().message().find("no CUDA device"), std::string::npos) << dev.status();
  }
  // A GPU index beyond any machine's is refused in every build.
  EXPECT_EQ(CreateDevice("cuda:4096").status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ParseDeviceSpec, NamesTheCpuAGpuOrAGpuByRank) {
  const DeviceSpec cpu = ParseDeviceSpec("cpu").value();
  EXPECT_FALSE(cpu.cuda);
  const DeviceSpec by_rank = ParseDeviceSpec("cuda").value();
  EXPECT_TRUE(by_rank.cuda);
  EXPECT_EQ(by_rank.ordinal, -1);
  const DeviceSpec third = ParseDeviceSpec("cuda:3").value();
  EXPECT_TRUE(third.cuda);
  EXPECT_EQ(third.ordinal, 3);
  EXPECT_EQ(ParseDeviceSpec("cuda:-1").status().code(), absl::StatusCode::kInvalidArgument);
}

// The workers of one host spread over its GPUs; a worker that sees one GPU takes it.
TEST(GpuForRank, SpreadsRanksOverTheVisibleGpus) {
  EXPECT_EQ(GpuForRank(0, 4), 0);
  EXPECT_EQ(GpuForRank(3, 4), 3);
  EXPECT_EQ(GpuForRank(5, 4), 1);
  EXPECT_EQ(GpuForRank(7, 2), 1);
  EXPECT_EQ(GpuForRank(6, 1), 0);
  EXPECT_EQ(GpuForRank(2, 0), -1);
}

// Without a CUDA build or a GPU, "cuda" by rank fails as "cuda:0" does, whatever the rank.
TEST(CreateDevice, CudaByRankNeedsAVisibleGpu) {
  for (int rank : {0, 3}) {
    auto dev = CreateDevice("cuda", rank);
    if (dev.ok()) {
      EXPECT_TRUE(BuiltWithCuda());
      EXPECT_EQ((*dev)->name().substr(0, 5), "cuda:");
      continue;
    }
    EXPECT_EQ(dev.status().code(), absl::StatusCode::kFailedPrecondition) << dev.status();
  }
}

}  // namespace
}  // namespace ps
