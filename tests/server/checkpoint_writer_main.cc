// A helper of checkpoint_crash_test: writes checkpoints into DIR without end, numbered from
// FIRST, each holding its number and COUNT floats equal to it, until it is killed.
//   checkpoint_writer DIR FIRST COUNT

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/storage/checkpoint.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: checkpoint_writer DIR FIRST COUNT\n");
    return 2;
  }
  auto dir = ps::CheckpointDir::Open(argv[1], 2);
  if (!dir.ok()) {
    std::fprintf(stderr, "%s\n", dir.status().ToString().c_str());
    return 1;
  }
  const uint64_t first = std::strtoull(argv[2], nullptr, 10);
  std::vector<float> values(std::strtoull(argv[3], nullptr, 10));
  for (uint64_t seq = first;; ++seq) {
    for (float& v : values) v = static_cast<float>(seq);
    ps::ByteWriter w;
    w.U64(seq);
    w.Floats(values);
    auto written = dir->Write(seq, w.bytes());
    if (!written.ok()) {
      std::fprintf(stderr, "%s\n", written.status().ToString().c_str());
      return 1;
    }
  }
}
