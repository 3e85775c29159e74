#include "common/data/ctr_dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/random.h"
#include "common/base/status_macros.h"

namespace ps {

namespace {

constexpr int kFieldsPerLine = 1 + kCtrDenseFields + kCtrCategoricalFields;

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

// Lines of a plain or gzip-compressed file, read in blocks: the file is never held whole.
class LineReader {
 public:
  explicit LineReader(gzFile file) : file_(file), block_(1 << 20) {}

  // The next line without its '\n' (nor a '\r' before it), valid until the next call; false at
  // the end; DATA_LOSS for a corrupt stream.
  absl::StatusOr<bool> Next(absl::string_view* line) {
    while (true) {
      const size_t newline = pending_.find('\n', scanned_);
      if (newline != std::string::npos) {
        *line = Take(newline, newline + 1);
        return true;
      }
      if (at_end_) {
        if (line_begin_ == pending_.size()) return false;
        *line = Take(pending_.size(), pending_.size());  // a last line without '\n'
        return true;
      }
      pending_.erase(0, line_begin_);  // the lines handed out before are no longer read
      line_begin_ = 0;
      scanned_ = pending_.size();
      const int got = gzread(file_, block_.data(), static_cast<unsigned>(block_.size()));
      if (got < 0) {
        int errnum = 0;
        return absl::DataLossError(absl::StrCat("corrupt: ", gzerror(file_, &errnum)));
      }
      at_end_ = got == 0;
      pending_.append(block_.data(), got);
    }
  }

 private:
  // pending_[line_begin_, end) without a trailing '\r'; the next line starts at `next`.
  absl::string_view Take(size_t end, size_t next) {
    size_t length = end - line_begin_;
    if (length > 0 && pending_[line_begin_ + length - 1] == '\r') --length;
    const absl::string_view line = absl::string_view(pending_).substr(line_begin_, length);
    line_begin_ = scanned_ = next;
    return line;
  }

  gzFile file_;
  std::vector<char> block_;
  std::string pending_;
  size_t line_begin_ = 0;  // start of the next line in pending_
  size_t scanned_ = 0;     // pending_[line_begin_, scanned_) holds no '\n'
  bool at_end_ = false;
};

absl::Status FieldError(int index, absl::string_view text, const char* why) {
  const std::string name = index == 0                 ? std::string("label")
                           : index <= kCtrDenseFields ? absl::StrCat("I", index)
                                                      : absl::StrCat("C", index - kCtrDenseFields);
  return absl::InvalidArgumentError(absl::StrCat(name, ": '", text, "' ", why));
}

bool ParseHex(absl::string_view text, uint64_t* value) {
  if (text.empty() || text.size() > 16) return false;
  uint64_t v = 0;
  for (char c : text) {
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else {
      return false;
    }
    v = (v << 4) | static_cast<uint64_t>(digit);
  }
  *value = v;
  return true;
}

}  // namespace

uint64_t CategoricalKey(int field, uint64_t value, bool empty) {
  // 0x637472 is "ctr": keys of other kinds of data would start from another word.
  const uint64_t field_key = Mix64(Mix64(0x637472) ^ (static_cast<uint64_t>(field) << 1 | empty));
  return empty ? field_key : Mix64(field_key ^ value);
}

absl::Status ParseCriteoLine(absl::string_view line, CtrSample* sample) {
  int index = 0;
  size_t begin = 0;
  while (true) {
    const size_t tab = line.find('\t', begin);
    const absl::string_view text =
        line.substr(begin, tab == absl::string_view::npos ? absl::string_view::npos : tab - begin);
    if (index >= kFieldsPerLine) {
      return absl::InvalidArgumentError(
          absl::StrCat(kFieldsPerLine, " tab-separated fields expected, got more"));
    }
    if (index == 0) {
      if (text != "0" && text != "1") return FieldError(index, text, "is not 0 or 1");
      sample->label = text[0] - '0';
    } else if (index <= kCtrDenseFields) {
      int64_t count = 0;
      if (!text.empty() && !absl::SimpleAtoi(text, &count)) {
        return FieldError(index, text, "is not an integer");
      }
      sample->dense[index - 1] = std::log1p(static_cast<float>(std::max<int64_t>(count, 0)));
    } else {
      const int field = index - 1 - kCtrDenseFields;
      uint64_t value = 0;
      if (!text.empty() && !ParseHex(text, &value)) {
        return FieldError(index, text, "is not hexadecimal of at most 16 digits");
      }
      sample->keys[field] = CategoricalKey(field, value, text.empty());
    }
    ++index;
    if (tab == absl::string_view::npos) break;
    begin = tab + 1;
  }
  if (index != kFieldsPerLine) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFieldsPerLine, " tab-separated fields expected, got ", index));
  }
  return absl::OkStatus();
}

void CtrDataset::Gather(const int32_t* indices, int n, float* x, int32_t* y) const {
  for (int i = 0; i < n; ++i) {
    const float* row = dense_.data() + int64_t{indices[i]} * kCtrDenseFields;
    std::copy(row, row + kCtrDenseFields, x + int64_t{i} * kCtrDenseFields);
    y[i] = labels_[indices[i]];
  }
}

void CtrDataset::GatherKeys(const int32_t* indices, int n, uint64_t* keys) const {
  for (int i = 0; i < n; ++i) {
    const uint64_t* row = keys_.data() + int64_t{indices[i]} * kCtrCategoricalFields;
    std::copy(row, row + kCtrCategoricalFields, keys + int64_t{i} * kCtrCategoricalFields);
  }
}

void CtrDataset::Truncate(int64_t n) {
  if (n <= 0 || n >= size()) return;
  labels_.resize(n);
  dense_.resize(n * kCtrDenseFields);
  keys_.resize(n * kCtrCategoricalFields);
}

void CtrDataset::Append(const CtrSample& sample) {
  labels_.push_back(static_cast<uint8_t>(sample.label));
  dense_.insert(dense_.end(), sample.dense, sample.dense + kCtrDenseFields);
  keys_.insert(keys_.end(), sample.keys, sample.keys + kCtrCategoricalFields);
}

void CtrDataset::CountSkipped(const std::string& error) {
  if (skipped_lines_++ == 0) first_skipped_ = error;
}

absl::StatusOr<CtrDataset> LoadCtrFile(const std::string& path, const CtrLoadOptions& options) {
  std::FILE* probe = std::fopen(path.c_str(), "rb");
  if (probe == nullptr) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  std::fclose(probe);
  GzHandle file(gzopen(path.c_str(), "rb"));
  if (file == nullptr) return absl::DataLossError(absl::StrCat(path, ": cannot be opened"));
  LineReader reader(file.get());
  CtrDataset data;
  CtrSample sample;
  absl::string_view line;
  for (int64_t number = 1; options.limit <= 0 || data.size() < options.limit; ++number) {
    absl::StatusOr<bool> more = reader.Next(&line);
    if (!more.ok()) return absl::DataLossError(absl::StrCat(path, ": ", more.status().message()));
    if (!*more) break;
    const absl::Status parsed = ParseCriteoLine(line, &sample);
    if (parsed.ok()) {
      data.Append(sample);
      continue;
    }
    const std::string where = absl::StrCat(path, ":", number, ": ", parsed.message());
    if (!options.skip_bad_lines) {
      return absl::DataLossError(
          absl::StrCat(where, " (--skip_bad_lines skips and counts such lines)"));
    }
    data.CountSkipped(where);
  }
  if (data.size() == 0) {
    return absl::DataLossError(
        absl::StrCat(path, ": no samples (", data.skipped_lines(), " malformed lines skipped)"));
  }
  return data;
}

absl::StatusOr<CtrDataset> LoadCriteo(const std::string& dir, const std::string& split,
                                      const CtrLoadOptions& options) {
  const std::string plain = absl::StrCat(dir, "/", split, ".tsv");
  absl::StatusOr<CtrDataset> data = LoadCtrFile(plain, options);
  if (!absl::IsNotFound(data.status())) return data;
  data = LoadCtrFile(plain + ".gz", options);
  if (absl::IsNotFound(data.status())) {
    return absl::NotFoundError(absl::StrCat("criteo data: neither ", plain, " nor ", plain,
                                            ".gz exists (ps_datagen ctr --out DIR writes both "
                                            "splits)"));
  }
  return data;
}

}  // namespace ps
