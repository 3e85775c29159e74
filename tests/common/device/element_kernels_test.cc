// The CUDA indexing kernels' element functions (element_kernels.h), compiled for the host and
// checked element by element against CpuDevice: the indexing the GPU runs, tested on machines
// without one. Exact throughout: the functions copy, compare, and sum in CpuDevice's order (this
// file is built with -ffp-contract=off, as CpuDevice is).

#include "common/device/element_kernels.h"

#include <cstdint>
#include <ostream>
#include <vector>

#include "common/device/cpu_device.h"
#include "gtest/gtest.h"
#include "tests/common/base/random_vector.h"
#include "tests/common/device/sparse_op_cases.h"

namespace ps {
namespace {

// element(i) for every i < n.
template <typename Element>
std::vector<float> EveryElement(int64_t n, Element element) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = element(i);
  return out;
}

struct ConvCase {
  int batch, height, width, channels, kernel;

  friend void PrintTo(const ConvCase& c, std::ostream* os) {
    *os << c.batch << " images " << c.height << "x" << c.width << "x" << c.channels << ", kernel "
        << c.kernel;
  }
};

class ConvElements : public testing::TestWithParam<ConvCase> {};

TEST_P(ConvElements, Im2ColAndCol2ImAreCpuDevicesToTheBit) {
  const auto [batch, h, w, c, k] = GetParam();
  const ValidConvShape shape = ValidConvShapeFor(h, w, c, k);
  const int64_t cols_size = int64_t{batch} * shape.out_h * shape.out_w * shape.patch_len;
  const auto x = RandomVector(int64_t{batch} * h * w * c, 1);
  CpuDevice cpu;
  std::vector<float> cols(cols_size);
  ASSERT_TRUE(cpu.Im2Col(batch, h, w, c, k, x.data(), cols.data()).ok());
  EXPECT_EQ(
      EveryElement(cols_size, [&](int64_t i) { return element::Im2Col(h, w, c, k, x.data(), i); }),
      cols);

  // Random floats, not integers: a sum in another order would differ in the last bits.
  const auto dcols = RandomVector(cols_size, 2);
  std::vector<float> dx(x.size());
  ASSERT_TRUE(cpu.Col2Im(batch, h, w, c, k, dcols.data(), dx.data()).ok());
  EXPECT_EQ(EveryElement(static_cast<int64_t>(x.size()),
                         [&](int64_t i) { return element::Col2Im(h, w, c, k, dcols.data(), i); }),
            dx);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvElements,
                         testing::Values(ConvCase{3, 12, 10, 4, 5},     // the CUDA parity test's
                                         ConvCase{2, 7, 9, 3, 1},       // 1x1: a copy
                                         ConvCase{2, 6, 6, 2, 6},       // the whole image: one row
                                         ConvCase{1, 28, 28, 1, 5},     // the CNN's first layer
                                         ConvCase{2, 12, 12, 32, 5}));  // its second

TEST(MaxPoolElements, ArgmaxIsCpuDevicesWithTiesToTheFirst) {
  const int batch = 3, h = 12, w = 10, c = 4, pool = 2;
  // Few distinct values, so most windows hold ties.
  auto x = RandomVector(int64_t{batch} * h * w * c, 3, 0.0f, 3.0f);
  for (float& v : x) v = static_cast<float>(static_cast<int>(v));
  const int64_t y_size = int64_t{batch} * (h / pool) * (w / pool) * c;
  CpuDevice cpu;
  std::vector<float> y(y_size);
  std::vector<int32_t> argmax(y_size);
  ASSERT_TRUE(cpu.MaxPoolForward(batch, h, w, c, pool, x.data(), y.data(), argmax.data()).ok());
  for (int64_t i = 0; i < y_size; ++i) {
    ASSERT_EQ(element::MaxPoolArgmax(h, w, c, pool, x.data(), i), argmax[i]) << "element " << i;
  }
}

TEST(EmbeddingElements, ConcatAndRowGradientsAreCpuDevicesToTheBit) {
  const EmbeddingConcatCase c = MakeEmbeddingConcatCase();
  EXPECT_EQ(EveryElement(c.out_size(),
                         [&](int64_t i) {
                           return element::EmbeddingConcat(c.width, c.x.data(), c.fields, c.dim,
                                                           c.rows.data(), c.sparse.lookups.data(),
                                                           i);
                         }),
            c.y);
  EXPECT_EQ(EveryElement(c.unique * c.dim,
                         [&](int64_t i) {
                           return element::EmbeddingRowGrad(c.width, c.dy.data(), c.fields, c.dim,
                                                            c.sparse.offsets.data(),
                                                            c.sparse.positions.data(), i);
                         }),
            c.row_grads);
}

TEST(DotInteractionElements, ForwardAndBackwardAreCpuDevicesToTheBit) {
  // 27 vectors: two of CpuDevice's blocks of 16; dim 21: its 16-wide loop and its tail.
  const DotInteractionCase c = MakeDotInteractionCase(7, 27, 21);
  EXPECT_EQ(
      EveryElement(c.out_size(),
                   [&](int64_t i) { return element::DotInteraction(c.n, c.dim, c.x.data(), i); }),
      c.y);
  EXPECT_EQ(EveryElement(static_cast<int64_t>(c.dx.size()),
                         [&](int64_t i) {
                           return element::DotInteractionGrad(c.n, c.dim, c.x.data(), c.dy.data(),
                                                              i);
                         }),
            c.dx);
}

TEST(PairIndex, CountsThePairsBelowInOrder) {
  int64_t next = 0;
  for (int hi = 1; hi < 40; ++hi) {
    for (int lo = 0; lo < hi; ++lo) ASSERT_EQ(element::PairIndex(hi, lo), next++);
  }
}

}  // namespace
}  // namespace ps
