#ifndef PS_COMMON_DATA_DATA_REGISTRY_H_
#define PS_COMMON_DATA_DATA_REGISTRY_H_

// Data sets by kind, as `--data KIND[:PATH]` names them. A new kind of data is a Dataset
// implementation plus one line in data_registry.cc's table.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/data/dataset.h"

namespace ps {

struct DataSpec {
  std::string kind = "fashion-mnist";
  std::string path;  // empty: the kind's default (a Debian package's folder)
};

// "KIND" or "KIND:PATH". INVALID_ARGUMENT for an unknown kind (naming the known ones) or an
// empty text.
absl::StatusOr<DataSpec> ParseDataSpec(const std::string& text);
std::string DataSpecText(const DataSpec& spec);  // back to "KIND[:PATH]"

enum class Split { kTrain, kTest };

struct DataOptions {
  int64_t limit = 0;            // samples to keep (0: all); a streamed kind reads no further
  bool skip_bad_lines = false;  // text kinds: skip and count malformed lines instead of failing
  int context = 0;              // a language model's window, in tokens (`text` needs it)
};

// Loads `split` of the data `spec` names; the kind's loader explains a missing or bad file.
absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const DataSpec& spec, Split split,
                                                     const DataOptions& options = {});

// The registered kinds, "a|b|...".
std::string DataKinds();

}  // namespace ps

#endif  // PS_COMMON_DATA_DATA_REGISTRY_H_
