#ifndef PS_COMMON_DATA_TEXT_DATASET_H_
#define PS_COMMON_DATA_TEXT_DATASET_H_

// A character-level text corpus for language models (`--data text:FILE`). The file is decoded as
// UTF-8; its vocabulary is the sorted set of the characters (code points) of the whole file, and
// a character's token id is its place in that set. The first 90 % of the characters are the
// training split, the last 10 % the validation split (Split::kTest).
//
// A sample is a window of `context` tokens, x (as floats: the ids), and the `context` tokens
// that follow each of them, its labels (SampleShape::labels = context). The training split has a
// window at every position (a worker's BatchPlan draws them by seed, rank and step); the
// validation split is cut into non-overlapping windows, so an evaluation reads each of its
// characters once (the last, partial window is left out).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/data/dataset.h"

namespace ps {

class TextDataset final : public Dataset {
 public:
  int64_t size() const override;
  SampleShape shape() const override;
  void Gather(const int32_t* indices, int n, float* x, int32_t* y) const override;
  void Truncate(int64_t n) override;
  uint64_t meaning_fingerprint() const override { return vocabulary_fingerprint(); }

  int context() const { return context_; }
  // The characters of the vocabulary, as Unicode code points, sorted; id i is vocabulary()[i].
  const std::vector<uint32_t>& vocabulary() const { return vocabulary_; }
  // A hash of the vocabulary: workers and shards of one job must agree on it.
  uint64_t vocabulary_fingerprint() const;
  int64_t tokens() const { return static_cast<int64_t>(ids_.size()); }  // of this split

  // Text <-> token ids. Encode: INVALID_ARGUMENT naming a character outside the vocabulary or
  // bytes that are not UTF-8.
  std::string Decode(const std::vector<int32_t>& ids) const;
  absl::StatusOr<std::vector<int32_t>> Encode(const std::string& text) const;

  // The split `train` (or the validation split) of `path` in windows of `context` (>= 1).
  // NOT_FOUND when the file cannot be read; DATA_LOSS naming the byte offset when it is not
  // UTF-8; INVALID_ARGUMENT when a split has fewer than context + 1 characters.
  static absl::StatusOr<TextDataset> Load(const std::string& path, bool train, int context);

 private:
  int context_ = 0;
  int64_t stride_ = 1;  // between consecutive windows' starts: 1 (training) or context
  int64_t limit_ = 0;   // windows kept by Truncate; 0: all
  std::vector<uint32_t> vocabulary_;
  std::vector<int32_t> ids_;  // this split's tokens
};

// Decodes UTF-8 into code points; DATA_LOSS naming the offset of the first malformed sequence
// (overlong forms, surrogates and values above U+10FFFF are malformed too).
absl::StatusOr<std::vector<uint32_t>> DecodeUtf8(const std::string& bytes);
void AppendUtf8(uint32_t code_point, std::string* out);

}  // namespace ps

#endif  // PS_COMMON_DATA_TEXT_DATASET_H_
