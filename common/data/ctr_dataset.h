#ifndef PS_COMMON_DATA_CTR_DATASET_H_
#define PS_COMMON_DATA_CTR_DATASET_H_

// Click logs in the Criteo display-advertising format, one sample per line:
//   label <TAB> I1 ... I13 <TAB> C1 ... C26
// label 0 or 1; I1..I13 integer counts, possibly empty (read as 0) or negative (clipped to 0);
// C1..C26 categorical values as hexadecimal text of at most 16 digits, possibly empty. A sample
// becomes 13 dense features log1p(max(count, 0)) and 26 keys, one per categorical field: a 64-bit
// hash of (field, value), where an empty value has a key of its own per field.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/data/dataset.h"

namespace ps {

inline constexpr int kCtrDenseFields = 13;
inline constexpr int kCtrCategoricalFields = 26;

// The key of categorical field `field` (0-based) holding `value`; `empty` gives the field's key
// for an empty value (then `value` is ignored). Keys of different fields differ whatever the
// values (the field is mixed into the hash), so all fields can share one table.
uint64_t CategoricalKey(int field, uint64_t value, bool empty);

// One parsed line. ParseCriteoLine fills it or returns INVALID_ARGUMENT naming the field
// ("I3: '1x' is not an integer", "C7: ...", "40 fields expected, got 39").
struct CtrSample {
  int32_t label = 0;
  float dense[kCtrDenseFields] = {};
  uint64_t keys[kCtrCategoricalFields] = {};
};
absl::Status ParseCriteoLine(absl::string_view line, CtrSample* sample);

struct CtrLoadOptions {
  int64_t limit = 0;            // stop after this many samples (0: read the whole file)
  bool skip_bad_lines = false;  // false: a malformed line is an error
};

class CtrDataset final : public Dataset {
 public:
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  SampleShape shape() const override {
    return SampleShape{kCtrDenseFields, 2, ImageShape{}, kCtrCategoricalFields};
  }
  void Gather(const int32_t* indices, int n, float* x, int32_t* y) const override;
  int keys_per_sample() const override { return kCtrCategoricalFields; }
  void GatherKeys(const int32_t* indices, int n, uint64_t* keys) const override;
  void Truncate(int64_t n) override;

  void Append(const CtrSample& sample);
  // Lines left out by CtrLoadOptions::skip_bad_lines, and the first one's error.
  int64_t skipped_lines() const { return skipped_lines_; }
  const std::string& first_skipped() const { return first_skipped_; }
  void CountSkipped(const std::string& error);

 private:
  std::vector<float> dense_;    // size() * kCtrDenseFields
  std::vector<uint64_t> keys_;  // size() * kCtrCategoricalFields
  std::vector<uint8_t> labels_;
  int64_t skipped_lines_ = 0;
  std::string first_skipped_;
};

// Reads one file, plain or gzip-compressed, streamed (the text is never held whole).
// NOT_FOUND when it is missing; DATA_LOSS "<path>:<line>: <field>: <why>" for a malformed line
// unless options.skip_bad_lines, and for a corrupt gzip stream; DATA_LOSS when no sample is left.
absl::StatusOr<CtrDataset> LoadCtrFile(const std::string& path, const CtrLoadOptions& options);

// `split` ("train" or "test") of a folder holding <split>.tsv or <split>.tsv.gz. NOT_FOUND naming
// both when neither is there.
absl::StatusOr<CtrDataset> LoadCriteo(const std::string& dir, const std::string& split,
                                      const CtrLoadOptions& options);

}  // namespace ps

#endif  // PS_COMMON_DATA_CTR_DATASET_H_
