#ifndef PS_TESTS_COMMON_DEVICE_CUDA_CUDA_PARITY_H_
#define PS_TESTS_COMMON_DEVICE_CUDA_CUDA_PARITY_H_

// The fixture of the CPU/CUDA parity tests: a CudaDevice (the test skips without a GPU) beside a
// CpuDevice, copies up and down, and a comparison with a tolerance relative to the largest value.

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "common/device/cpu_device.h"
#include "common/device/cuda/cuda_device.h"
#include "gtest/gtest.h"

namespace ps {

class CudaParity : public testing::Test {
 public:
  void SetUp() override {
    auto dev = CudaDevice::Create(0);
    if (!dev.ok()) GTEST_SKIP() << "no GPU: " << dev.status();
    gpu_ = std::move(*dev);
  }

  // Host -> device copy of v, kept alive by the fixture.
  template <typename T>
  T* Up(const std::vector<T>& v) {
    auto buf = gpu_->Allocate(v.size() * sizeof(T));
    EXPECT_TRUE(buf.ok());
    EXPECT_TRUE(gpu_->CopyToDevice(v.data(), v.size() * sizeof(T), buf->template as<void>()).ok());
    buffers_.push_back(std::move(*buf));
    return buffers_.back().template as<T>();
  }
  template <typename T>
  std::vector<T> Down(const T* p, size_t n) {
    std::vector<T> v(n);
    EXPECT_TRUE(gpu_->CopyToHost(p, n * sizeof(T), v.data()).ok());
    return v;
  }

  static void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                          double relative_to_max, double absolute = 0.0) {
    ASSERT_EQ(got.size(), want.size());
    double scale = 0.0;
    for (float w : want) scale = std::max(scale, static_cast<double>(std::abs(w)));
    const double tol = absolute + relative_to_max * scale;
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << "index " << i;
  }

  CpuDevice cpu_;
  std::unique_ptr<CudaDevice> gpu_;
  std::vector<DeviceBuffer> buffers_;
};

}  // namespace ps

#endif  // PS_TESTS_COMMON_DEVICE_CUDA_CUDA_PARITY_H_
