#include "common/data/data_registry.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/data/ctr_dataset.h"
#include "common/data/text_dataset.h"
#include "spdlog/spdlog.h"

namespace ps {

namespace {

const char* SplitName(Split split) { return split == Split::kTrain ? "train" : "test"; }

absl::StatusOr<std::unique_ptr<Dataset>> OpenFashionMnist(const std::string& dir, Split split,
                                                          const DataOptions& options) {
  ASSIGN_OR_RETURN(ImageDataset data, LoadFashionMnist(dir, SplitName(split)));
  data.Truncate(options.limit);
  return std::make_unique<ImageDataset>(std::move(data));
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenCriteo(const std::string& dir, Split split,
                                                    const DataOptions& options) {
  ASSIGN_OR_RETURN(CtrDataset data,
                   LoadCriteo(dir, SplitName(split), {options.limit, options.skip_bad_lines}));
  if (data.skipped_lines() > 0) {
    spdlog::warn("{}: {} malformed lines skipped (--skip_bad_lines); the first: {}",
                 SplitName(split), data.skipped_lines(), data.first_skipped());
  }
  return std::make_unique<CtrDataset>(std::move(data));
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenText(const std::string& file, Split split,
                                                  const DataOptions& options) {
  if (options.context < 1) {
    return absl::InvalidArgumentError(
        "--data text:FILE is for a language model: it needs --context (tokens per window)");
  }
  ASSIGN_OR_RETURN(TextDataset data,
                   TextDataset::Load(file, split == Split::kTrain, options.context));
  data.Truncate(options.limit);
  return std::make_unique<TextDataset>(std::move(data));
}

struct DataKind {
  const char* name;
  const char* default_path;  // used when the spec names none
  absl::StatusOr<std::unique_ptr<Dataset>> (*open)(const std::string& path, Split split,
                                                   const DataOptions& options);
};

// One line per kind of data.
const std::vector<DataKind>& Kinds() {
  static const std::vector<DataKind> kinds = {
      {"fashion-mnist", kDefaultFashionMnistDir, &OpenFashionMnist},
      {"criteo", "data/criteo", &OpenCriteo},
      {"text", "data/text/kjv.txt", &OpenText},
  };
  return kinds;
}

const DataKind* FindKind(const std::string& name) {
  for (const DataKind& k : Kinds()) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

}  // namespace

std::string DataKinds() {
  std::vector<std::string> names;
  for (const DataKind& k : Kinds()) names.push_back(k.name);
  return absl::StrJoin(names, "|");
}

absl::StatusOr<DataSpec> ParseDataSpec(const std::string& text) {
  DataSpec spec;
  const size_t colon = text.find(':');
  spec.kind = text.substr(0, colon);
  if (colon != std::string::npos) spec.path = text.substr(colon + 1);
  if (FindKind(spec.kind) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--data '", text, "': unknown kind '", spec.kind,
                                                   "' (", DataKinds(), ")[:PATH]"));
  }
  if (colon != std::string::npos && spec.path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--data '", text, "': an empty PATH (leave out ':' for the default)"));
  }
  return spec;
}

std::string DataSpecText(const DataSpec& spec) {
  return spec.path.empty() ? spec.kind : absl::StrCat(spec.kind, ":", spec.path);
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const DataSpec& spec, Split split,
                                                     const DataOptions& options) {
  const DataKind* kind = FindKind(spec.kind);
  if (kind == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown kind of data '", spec.kind, "' (", DataKinds(), ")"));
  }
  return kind->open(spec.path.empty() ? kind->default_path : spec.path, split, options);
}

}  // namespace ps
