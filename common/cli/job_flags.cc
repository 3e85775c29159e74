#include "common/cli/job_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, require_all_work, "auto",
          "Fail the job (exit code 3 of the final evaluation, 1 of ps_launch) when some "
          "worker's work was skipped, i.e. steps that no update contains (a worker gone while "
          "BSP went on without it): true, false, or auto (true under BSP without backup workers or "
          "--max_seconds).");

namespace ps {

absl::StatusOr<bool> RequireAllWorkFromFlags(bool all_work_by_design) {
  const std::string value = absl::GetFlag(FLAGS_require_all_work);
  if (value == "true") return true;
  if (value == "false") return false;
  if (value == "auto") return all_work_by_design;
  return absl::InvalidArgumentError(
      absl::StrCat("--require_all_work '", value, "' must be true, false or auto"));
}

}  // namespace ps
