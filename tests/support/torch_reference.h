#ifndef PS_TESTS_SUPPORT_TORCH_REFERENCE_H_
#define PS_TESTS_SUPPORT_TORCH_REFERENCE_H_

// Comparing with a PyTorch reference that /usr/bin/python3 computes (Debian's python3-torch):
// raw arrays handed over in files both ways, through a test's scratch folder, and a relative
// comparison of the results.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/scratch_dir.h"

namespace ps {

// Whether /usr/bin/python3 imports torch; tests skip (GTEST_SKIP) without it.
inline bool HaveTorch() {
  return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

// A test against a reference script: skipped (GTEST_SKIP) where /usr/bin/python3 has no torch.
class TorchParityTest : public ScratchDirTest {
 protected:
  void SetUp() override {
    if (!HaveTorch()) GTEST_SKIP() << "no python3-torch";
    ScratchDirTest::SetUp();
  }
  // Runs `script` with `arguments` under /usr/bin/python3; true when it exited 0. A failure
  // names the command.
  static bool RunReference(const std::string& script, const std::string& arguments) {
    const std::string command = "/usr/bin/python3 " + script + " " + arguments;
    const int status = std::system(command.c_str());
    EXPECT_EQ(status, 0) << command;
    return status == 0;
  }
};

// `v`'s elements as they lie in memory (little-endian on every host this runs on).
template <typename T>
void WriteRaw(const std::string& path, const std::vector<T>& v) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()),
             static_cast<std::streamsize>(v.size() * sizeof(T)));
}

inline std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  std::vector<float> v(static_cast<size_t>(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()),
          static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

// |got - want| <= relative |want|, with a floor of relative x 1e-2 of the largest |want| of the
// tensor (values that cancel to near zero carry their operands' rounding, not their own). Reports
// the first five misses of `what`.
inline void ExpectClose(const float* got, const float* want, size_t n, const std::string& what,
                        double relative = 1e-4) {
  double scale = 0;
  for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  int reported = 0;
  for (size_t i = 0; i < n; ++i) {
    const double tolerance =
        relative * std::max(std::abs(static_cast<double>(want[i])), 1e-2 * scale);
    if (!(std::abs(static_cast<double>(got[i]) - want[i]) <= tolerance) && reported++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs PyTorch's " << want[i];
    }
  }
}

}  // namespace ps

#endif  // PS_TESTS_SUPPORT_TORCH_REFERENCE_H_
