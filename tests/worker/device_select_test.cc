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

}  // namespace
}  // namespace ps
