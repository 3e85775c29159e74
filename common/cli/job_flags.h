#ifndef PS_COMMON_CLI_JOB_FLAGS_H_
#define PS_COMMON_CLI_JOB_FLAGS_H_

// Flags about the job as a whole, defined once for ps_worker (--evaluate, which judges the
// finished job) and ps_launch (which passes them on by name, see ForwardedFlags). For main()
// files only.

#include "absl/status/statusor.h"

namespace ps {

// --require_all_work: whether skipped work (steps no update contains) fails the job. "auto" is
// `all_work_by_design`: true for a BSP job (whose every step is meant to hold every worker's
// share) without backup workers or a time limit, false under SSP and ASP. INVALID_ARGUMENT for
// another value.
absl::StatusOr<bool> RequireAllWorkFromFlags(bool all_work_by_design);

}  // namespace ps

#endif  // PS_COMMON_CLI_JOB_FLAGS_H_
