#include "common/data/text_dataset.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/random.h"

namespace ps {

absl::StatusOr<std::vector<uint32_t>> DecodeUtf8(const std::string& bytes) {
  std::vector<uint32_t> out;
  out.reserve(bytes.size());
  size_t i = 0;
  const auto bad = [&bytes](size_t at) {
    return absl::DataLossError(absl::StrFormat("byte %d (0x%02x) is not valid UTF-8", at,
                                               static_cast<unsigned char>(bytes[at])));
  };
  while (i < bytes.size()) {
    const unsigned char lead = static_cast<unsigned char>(bytes[i]);
    int extra = 0;
    uint32_t cp = 0, min = 0;
    if (lead < 0x80) {
      cp = lead;
    } else if ((lead & 0xe0) == 0xc0) {
      extra = 1, cp = lead & 0x1f, min = 0x80;
    } else if ((lead & 0xf0) == 0xe0) {
      extra = 2, cp = lead & 0x0f, min = 0x800;
    } else if ((lead & 0xf8) == 0xf0) {
      extra = 3, cp = lead & 0x07, min = 0x10000;
    } else {
      return bad(i);
    }
    if (extra > 0 && i + static_cast<size_t>(extra) >= bytes.size()) return bad(i);  // cut short
    for (int k = 1; k <= extra; ++k) {
      const unsigned char c = static_cast<unsigned char>(bytes[i + k]);
      if ((c & 0xc0) != 0x80) return bad(i);
      cp = (cp << 6) | (c & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return bad(i);
    out.push_back(cp);
    i += static_cast<size_t>(extra) + 1;
  }
  return out;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

absl::StatusOr<TextDataset> TextDataset::Load(const std::string& path, bool train, int context) {
  if (context < 1) {
    return absl::InvalidArgumentError(absl::StrCat("context must be >= 1, got ", context));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read text file ", path));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<std::vector<uint32_t>> chars = DecodeUtf8(bytes);
  if (!chars.ok()) return absl::DataLossError(absl::StrCat(path, ": ", chars.status().message()));
  TextDataset data;
  data.context_ = context;
  data.stride_ = train ? 1 : context;
  data.vocabulary_ = *chars;
  std::sort(data.vocabulary_.begin(), data.vocabulary_.end());
  data.vocabulary_.erase(std::unique(data.vocabulary_.begin(), data.vocabulary_.end()),
                         data.vocabulary_.end());
  const int64_t n = static_cast<int64_t>(chars->size());
  const int64_t cut = n - n / 10;  // the last 10 % validate
  const int64_t begin = train ? 0 : cut, end = train ? cut : n;
  if (end - begin < int64_t{context} + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the ", train ? "training" : "validation", " split has ", end - begin,
                     " characters, fewer than context + 1 = ", context + 1));
  }
  data.ids_.reserve(end - begin);
  for (int64_t i = begin; i < end; ++i) {
    const uint32_t c = (*chars)[i];
    data.ids_.push_back(
        static_cast<int32_t>(std::lower_bound(data.vocabulary_.begin(), data.vocabulary_.end(), c) -
                             data.vocabulary_.begin()));
  }
  return data;
}

int64_t TextDataset::size() const {
  const int64_t n = tokens();
  // A window needs its context and one more token (the last position's label).
  const int64_t windows = stride_ == 1 ? n - context_ : (n - 1) / context_;
  return limit_ > 0 ? std::min(limit_, windows) : windows;
}

SampleShape TextDataset::shape() const {
  SampleShape s;
  s.features = context_;
  s.num_classes = static_cast<int>(vocabulary_.size());
  s.labels = context_;
  return s;
}

void TextDataset::Gather(const int32_t* indices, int n, float* x, int32_t* y) const {
  for (int i = 0; i < n; ++i) {
    const int64_t start = int64_t{indices[i]} * stride_;
    const int32_t* window = ids_.data() + start;
    for (int t = 0; t < context_; ++t) {
      x[int64_t{i} * context_ + t] = static_cast<float>(window[t]);
      y[int64_t{i} * context_ + t] = window[t + 1];
    }
  }
}

void TextDataset::Truncate(int64_t n) { limit_ = n > 0 ? n : 0; }

uint64_t TextDataset::vocabulary_fingerprint() const {
  uint64_t h = Mix64(vocabulary_.size());
  for (uint32_t c : vocabulary_) h = Mix64(h ^ c);
  return h;
}

std::string TextDataset::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id >= 0 && id < static_cast<int32_t>(vocabulary_.size())) AppendUtf8(vocabulary_[id], &out);
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> TextDataset::Encode(const std::string& text) const {
  absl::StatusOr<std::vector<uint32_t>> chars = DecodeUtf8(text);
  if (!chars.ok()) return absl::InvalidArgumentError(chars.status().message());
  std::vector<int32_t> ids;
  for (uint32_t c : *chars) {
    const auto it = std::lower_bound(vocabulary_.begin(), vocabulary_.end(), c);
    if (it == vocabulary_.end() || *it != c) {
      std::string shown;
      AppendUtf8(c, &shown);
      return absl::InvalidArgumentError(absl::StrCat("character '", shown, "' (U+",
                                                     absl::StrFormat("%04X", c),
                                                     ") is not in the corpus's vocabulary"));
    }
    ids.push_back(static_cast<int32_t>(it - vocabulary_.begin()));
  }
  return ids;
}

}  // namespace ps
