#include "common/data/dataset.h"

#include <zlib.h>

#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace ps {

namespace {

// Fashion-MNIST training-set pixel statistics after scaling to [0, 1].
constexpr float kPixelMean = 0.2860f;
constexpr float kPixelStddev = 0.3530f;
constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;
// Guards against a corrupt header asking for an absurd allocation.
constexpr int64_t kMaxIdxBytes = int64_t{1} << 31;

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

// Reads exactly n bytes or explains why not.
absl::Status ReadExactly(gzFile f, const std::string& path, void* out, int64_t n,
                         const char* what) {
  auto* dst = static_cast<char*>(out);
  while (n > 0) {
    const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(n, 1 << 30));
    const int got = gzread(f, dst, chunk);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      return absl::DataLossError(absl::StrCat(path, ": corrupt while reading ", what, ": ", msg));
    }
    if (got == 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      return absl::DataLossError(absl::StrCat(path, ": truncated: ", n, " bytes of ", what,
                                              " missing", errnum != Z_OK ? ": " : "",
                                              errnum != Z_OK ? msg : ""));
    }
    dst += got;
    n -= got;
  }
  return absl::OkStatus();
}

uint32_t BigEndian32(const unsigned char* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

}  // namespace

absl::StatusOr<IdxFile> ReadIdxFile(const std::string& path, uint32_t expected_magic) {
  std::FILE* probe = std::fopen(path.c_str(), "rb");
  if (probe == nullptr) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::fclose(probe);
  GzHandle f(gzopen(path.c_str(), "rb"));
  if (!f) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  unsigned char header[4];
  RETURN_IF_ERROR(ReadExactly(f.get(), path, header, 4, "the header"));
  const uint32_t magic = BigEndian32(header);
  if (magic != expected_magic) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "0x%08x, expected 0x%08x", magic, expected_magic);
    return absl::DataLossError(absl::StrCat(path, ": wrong magic number ", buf));
  }
  const int rank = header[3];
  IdxFile idx;
  int64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    unsigned char d[4];
    RETURN_IF_ERROR(ReadExactly(f.get(), path, d, 4, "the dimensions"));
    const uint32_t dim = BigEndian32(d);
    if (dim == 0 || dim > (1u << 30)) {
      return absl::DataLossError(absl::StrCat(path, ": implausible dimension ", dim));
    }
    idx.dims.push_back(static_cast<int32_t>(dim));
    count *= dim;
    if (count > kMaxIdxBytes) {
      return absl::DataLossError(
          absl::StrCat(path, ": header claims over ", kMaxIdxBytes, " bytes"));
    }
  }
  idx.data.resize(count);
  RETURN_IF_ERROR(ReadExactly(f.get(), path, idx.data.data(), count, "the data"));
  // Trailing bytes mean the header does not describe the file.
  char extra;
  const int more = gzread(f.get(), &extra, 1);
  if (more != 0) {
    return absl::DataLossError(absl::StrCat(
        path, more < 0 ? ": corrupt after the data" : ": data beyond the header's size"));
  }
  return idx;
}

absl::StatusOr<ImageDataset> LoadFashionMnist(const std::string& dir, const std::string& split) {
  std::string prefix;
  if (split == "train") {
    prefix = "train";
  } else if (split == "test") {
    prefix = "t10k";
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown split '", split, "' (train|test)"));
  }
  const std::string images_path = absl::StrCat(dir, "/", prefix, "-images-idx3-ubyte.gz");
  const std::string labels_path = absl::StrCat(dir, "/", prefix, "-labels-idx1-ubyte.gz");
  ASSIGN_OR_RETURN(IdxFile images, ReadIdxFile(images_path, kImagesMagic));
  ASSIGN_OR_RETURN(IdxFile labels, ReadIdxFile(labels_path, kLabelsMagic));
  if (images.dims.size() != 3 || labels.dims.size() != 1) {
    return absl::DataLossError(absl::StrCat(images_path, ": expected 3 image and 1 label dims"));
  }
  if (images.dims[0] != labels.dims[0]) {
    return absl::DataLossError(absl::StrCat(images_path, " holds ", images.dims[0], " images but ",
                                            labels_path, " holds ", labels.dims[0], " labels"));
  }
  ImageDataset ds;
  ds.rows = images.dims[1];
  ds.cols = images.dims[2];
  ds.pixels = std::move(images.data);
  ds.labels.reserve(labels.data.size());
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= ds.num_classes) {
      return absl::DataLossError(absl::StrCat(labels_path, ": label ", int{labels.data[i]},
                                              " of sample ", i, " is not in 0..9"));
    }
    ds.labels.push_back(labels.data[i]);
  }
  return ds;
}

void ImageDataset::Gather(const int32_t* indices, int n, float* x, int32_t* y) const {
  const int64_t f = features();
  const float scale = 1.0f / (255.0f * kPixelStddev);
  const float shift = kPixelMean / kPixelStddev;
  for (int i = 0; i < n; ++i) {
    const uint8_t* src = pixels.data() + static_cast<int64_t>(indices[i]) * f;
    float* dst = x + static_cast<int64_t>(i) * f;
    for (int64_t j = 0; j < f; ++j) dst[j] = src[j] * scale - shift;
    y[i] = labels[indices[i]];
  }
}

void ImageDataset::Truncate(int64_t n) {
  if (n <= 0 || n >= size()) return;
  labels.resize(n);
  pixels.resize(n * features());
}

}  // namespace ps
