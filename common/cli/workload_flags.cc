#include "common/cli/workload_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"

ABSL_FLAG(std::string, data, "fashion-mnist",
          "The data, KIND[:PATH]: fashion-mnist[:DIR] (default DIR: Debian's "
          "dataset-fashion-mnist folder, /usr/share/datasets/fashion-mnist), criteo[:DIR] "
          "(DIR/train.tsv[.gz] and DIR/test.tsv[.gz] in the Criteo format; default data/criteo, "
          "which scripts/setup.sh writes with ps_datagen), or text[:FILE] (a UTF-8 text for a "
          "character language model; default data/text/kjv.txt, the King James Bible that "
          "scripts/setup.sh writes from Debian's bible-kjv).");
ABSL_FLAG(bool, skip_bad_lines, false,
          "Text data (criteo): skip malformed lines and count them (a warning names the first) "
          "instead of failing on the first.");
ABSL_FLAG(int64_t, train_limit, 0, "Use only the first N training samples (0: all).");
ABSL_FLAG(int64_t, test_limit, 0, "Use only the first N test samples (0: all).");
ABSL_FLAG(std::string, model, "mlp",
          "The model: mlp, cnn, dlrm (with --data criteo) or gpt (with --data text).");
ABSL_FLAG(int32_t, layers, 4, "gpt: transformer blocks.");
ABSL_FLAG(int32_t, heads, 4, "gpt: attention heads per block (they must divide --dim).");
ABSL_FLAG(int32_t, dim, 128, "gpt: the model's width.");
ABSL_FLAG(int32_t, context, 64, "gpt: tokens per window (the attention's span).");
ABSL_FLAG(int64_t, embedding_dim, 16,
          "dlrm: the width of the embedding rows and the bottom MLP's output.");
ABSL_FLAG(
    std::string, hidden, "",
    "Hidden fully connected widths, comma-separated (default: mlp 256,128; cnn 128; dlrm, its "
    "top MLP: 64).");
ABSL_FLAG(int32_t, batch_size, 32, "Samples per worker per micro-batch.");
ABSL_FLAG(int32_t, accumulate, 1,
          "Micro-batches accumulated into one push (gradient accumulation).");
ABSL_FLAG(int32_t, epochs, 5, "Epochs over the training set.");
ABSL_FLAG(int64_t, steps, 0,
          "Train this many global steps instead of --epochs (0: epochs); for data whose epoch is "
          "long, such as a text's windows at every position.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the initial weights and of every epoch's sample order.");

namespace ps {

absl::StatusOr<Workload> WorkloadFromFlags() {
  Workload w;
  ASSIGN_OR_RETURN(w.data, ParseDataSpec(absl::GetFlag(FLAGS_data)));
  w.model.name = absl::GetFlag(FLAGS_model);
  if (absl::StrCat("|", ModelNames(), "|").find(absl::StrCat("|", w.model.name, "|")) ==
      std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model '", w.model.name, "' is not one of ", ModelNames()));
  }
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_hidden), ',', absl::SkipEmpty())) {
    int64_t width = 0;
    if (!absl::SimpleAtoi(part, &width) || width <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--hidden: '", part, "' is not a positive width"));
    }
    w.model.hidden.push_back(width);
  }
  w.model.embedding_dim = absl::GetFlag(FLAGS_embedding_dim);
  if (w.model.embedding_dim < 1) return absl::InvalidArgumentError("--embedding_dim must be >= 1");
  w.model.layers = absl::GetFlag(FLAGS_layers);
  w.model.heads = absl::GetFlag(FLAGS_heads);
  w.model.dim = absl::GetFlag(FLAGS_dim);
  w.context = absl::GetFlag(FLAGS_context);
  if (w.model.layers < 1 || w.model.heads < 1 || w.model.dim < 1 || w.context < 1 ||
      w.model.dim % w.model.heads != 0) {
    return absl::InvalidArgumentError(
        "--layers, --heads, --dim and --context must be >= 1, and --heads must divide --dim");
  }
  w.skip_bad_lines = absl::GetFlag(FLAGS_skip_bad_lines);
  w.train_limit = absl::GetFlag(FLAGS_train_limit);
  w.test_limit = absl::GetFlag(FLAGS_test_limit);
  if (w.train_limit < 0 || w.test_limit < 0) {
    return absl::InvalidArgumentError("--train_limit and --test_limit must be >= 0 (0: all)");
  }
  w.batch_size = absl::GetFlag(FLAGS_batch_size);
  w.accumulate = absl::GetFlag(FLAGS_accumulate);
  w.epochs = absl::GetFlag(FLAGS_epochs);
  w.steps = absl::GetFlag(FLAGS_steps);
  if (w.steps < 0) return absl::InvalidArgumentError("--steps must be >= 0");
  w.seed = absl::GetFlag(FLAGS_seed);
  if (w.batch_size < 1) return absl::InvalidArgumentError("--batch_size must be >= 1");
  if (w.accumulate < 1) return absl::InvalidArgumentError("--accumulate must be >= 1");
  if (w.epochs < 1) return absl::InvalidArgumentError("--epochs must be >= 1");
  return w;
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenWorkloadData(const Workload& workload, Split split) {
  DataOptions options;
  options.limit = split == Split::kTrain ? workload.train_limit : workload.test_limit;
  options.skip_bad_lines = workload.skip_bad_lines;
  options.context = workload.context;
  return OpenDataset(workload.data, split, options);
}

}  // namespace ps
