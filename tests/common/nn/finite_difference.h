#ifndef PS_TESTS_COMMON_NN_FINITE_DIFFERENCE_H_
#define PS_TESTS_COMMON_NN_FINITE_DIFFERENCE_H_

// Central differences for the layers' and models' gradient checks.

#include <vector>

#include "common/device/cpu_device.h"
#include "common/nn/layers.h"
#include "gtest/gtest.h"

namespace ps {

inline constexpr float kFiniteDifferenceStep = 1e-2f;

// sum(y * r) for the layer's forward pass over `params`: its gradient wrt y is r.
inline double Weighted(Layer& layer, CpuDevice& dev, const float* params,
                       const std::vector<float>& x, int batch, const std::vector<float>& r) {
  std::vector<float> y(batch * layer.output_size());
  EXPECT_TRUE(layer.Forward(dev, {params, x.data(), batch, y.data()}).ok());
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(y[i]) * r[i];
  return s;
}

// (f(v + h e_i) - f(v - h e_i)) / 2h, restoring v[i].
template <typename F>
double Central(std::vector<float>& v, size_t i, F objective) {
  const float keep = v[i];
  v[i] = keep + kFiniteDifferenceStep;
  const double up = objective();
  v[i] = keep - kFiniteDifferenceStep;
  const double down = objective();
  v[i] = keep;
  return (up - down) / (2 * kFiniteDifferenceStep);
}

}  // namespace ps

#endif  // PS_TESTS_COMMON_NN_FINITE_DIFFERENCE_H_
