#ifndef PS_WORKER_DELAY_INJECTOR_H_
#define PS_WORKER_DELAY_INJECTOR_H_

// Injected slowness, for staleness experiments: a persistent straggler (every step takes
// `slowdown` times as long), transient jitter (with probability p a step takes `factor` times as
// long, decided by (seed, rank, step) so that runs repeat), and one pause of a given length at a
// given step. Times are relative to the worker's normal step time: an exponential moving average
// of its steps' own work (pull, compute, push) without injected delay and without the time the
// shards held its pulls for other workers (whose injected delays that time holds).

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ps {

struct DelayOptions {
  double slowdown = 1.0;            // >= 1
  double jitter_probability = 0.0;  // in [0, 1]
  double jitter_factor = 1.0;       // >= 1
  int64_t pause_step = -1;          // -1: no pause
  absl::Duration pause;             // slept once, after step pause_step
  uint64_t seed = 1;
  int rank = 0;
};

// INVALID_ARGUMENT naming the option when one is out of range.
absl::Status ValidateDelayOptions(const DelayOptions& options);

// "PROBABILITY:FACTOR" into the jitter options and "STEP:SECONDS" into the pause; "" leaves them
// as they are. INVALID_ARGUMENT naming `source` (the flag or variable) and the form expected.
// ps_worker's --jitter and --pause, and a Python worker's PS_JITTER and PS_PAUSE.
absl::Status ParseJitter(absl::string_view source, absl::string_view text, DelayOptions* options);
absl::Status ParsePause(absl::string_view source, absl::string_view text, DelayOptions* options);

class DelayInjector {
 public:
  explicit DelayInjector(const DelayOptions& options) : options_(options) {}

  // Takes the worker's own un-delayed work time of `step` (not the time it waited for others)
  // and returns the delay to add to it.
  absl::Duration DelayFor(int64_t step, absl::Duration work);
  // Whether `step` is one of the random slow steps.
  bool Jittered(int64_t step) const;
  absl::Duration normal_step() const { return normal_step_; }

 private:
  DelayOptions options_;
  absl::Duration normal_step_ = absl::ZeroDuration();
  bool primed_ = false;
};

}  // namespace ps

#endif  // PS_WORKER_DELAY_INJECTOR_H_
