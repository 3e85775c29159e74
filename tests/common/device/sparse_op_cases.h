#ifndef PS_TESTS_COMMON_DEVICE_SPARSE_OP_CASES_H_
#define PS_TESTS_COMMON_DEVICE_SPARSE_OP_CASES_H_

// DLRM's ops on deterministic inputs, with CpuDevice's outputs: the reference that the CUDA
// launches (cuda_sparse_test, where a GPU is) and their element functions on the host
// (element_kernels_test) are compared with.

#include <cstdint>
#include <vector>

#include "common/device/cpu_device.h"
#include "common/nn/sparse_lookup.h"
#include "gtest/gtest.h"
#include "tests/common/base/random_vector.h"

namespace ps {

// EmbeddingConcat over `batch` samples of `width` dense columns and `fields` lookups of `dim`
// floats, the keys repeating (23 distinct), so that rows gather several lookups' gradients.
struct EmbeddingConcatCase {
  int batch = 37, width = 5, fields = 4, dim = 6;
  SparseLookups sparse;  // the batch's keys, deduplicated
  int64_t unique = 0;
  std::vector<float> rows, x, dy;       // inputs
  std::vector<float> y, dx, row_grads;  // CpuDevice's forward and backward

  int64_t out_size() const { return int64_t{batch} * (width + int64_t{fields} * dim); }
};

inline EmbeddingConcatCase MakeEmbeddingConcatCase() {
  EmbeddingConcatCase c;
  std::vector<uint64_t> keys(c.batch * c.fields);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = (i * 7919) % 23;
  c.sparse = DeduplicateKeys(keys.data(), keys.size());
  c.unique = static_cast<int64_t>(c.sparse.unique_keys.size());
  c.rows = RandomVector(c.unique * c.dim, 3);
  c.x = RandomVector(c.batch * c.width, 4);
  c.dy = RandomVector(c.out_size(), 5);
  c.y.resize(c.out_size());
  c.dx.resize(c.x.size());
  c.row_grads.resize(c.rows.size());
  CpuDevice cpu;
  EXPECT_TRUE(cpu.EmbeddingConcatForward(c.batch, c.width, c.x.data(), c.fields, c.dim,
                                         c.rows.data(), c.sparse.lookups.data(), c.y.data())
                  .ok());
  EXPECT_TRUE(cpu.EmbeddingConcatBackward(c.batch, c.width, c.dy.data(), c.fields, c.dim, c.unique,
                                          c.sparse.offsets.data(), c.sparse.positions.data(),
                                          c.dx.data(), c.row_grads.data())
                  .ok());
  return c;
}

// DotInteraction over `batch` samples of n vectors of dim floats.
struct DotInteractionCase {
  int batch = 0, n = 0, dim = 0;
  std::vector<float> x, dy;  // inputs
  std::vector<float> y, dx;  // CpuDevice's forward and backward

  int64_t out_size() const { return int64_t{batch} * (dim + int64_t{n} * (n - 1) / 2); }
};

inline DotInteractionCase MakeDotInteractionCase(int batch, int n, int dim) {
  DotInteractionCase c;
  c.batch = batch;
  c.n = n;
  c.dim = dim;
  c.x = RandomVector(int64_t{batch} * n * dim, 6);
  c.dy = RandomVector(c.out_size(), 7);
  c.y.resize(c.out_size());
  c.dx.resize(c.x.size());
  CpuDevice cpu;
  EXPECT_TRUE(cpu.DotInteractionForward(batch, n, dim, c.x.data(), c.y.data()).ok());
  EXPECT_TRUE(cpu.DotInteractionBackward(batch, n, dim, c.x.data(), c.dy.data(), c.dx.data()).ok());
  return c;
}

}  // namespace ps

#endif  // PS_TESTS_COMMON_DEVICE_SPARSE_OP_CASES_H_
