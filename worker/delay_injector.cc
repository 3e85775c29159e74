#include "worker/delay_injector.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/random.h"

namespace ps {

namespace {
// Weight of the newest step in the moving average of the normal step time.
constexpr double kSmoothing = 0.1;
}  // namespace

absl::Status ValidateDelayOptions(const DelayOptions& o) {
  if (!(o.slowdown >= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("slowdown must be >= 1, got ", o.slowdown));
  }
  if (!(o.jitter_probability >= 0.0 && o.jitter_probability <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("jitter probability must be in [0, 1], got ", o.jitter_probability));
  }
  if (!(o.jitter_factor >= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("jitter factor must be >= 1, got ", o.jitter_factor));
  }
  if (o.pause < absl::ZeroDuration()) return absl::InvalidArgumentError("pause must be >= 0");
  return absl::OkStatus();
}

absl::Status ParseJitter(absl::string_view source, absl::string_view text, DelayOptions* options) {
  if (text.empty()) return absl::OkStatus();
  const std::vector<std::string> parts = absl::StrSplit(text, ':');
  if (parts.size() != 2 || !absl::SimpleAtod(parts[0], &options->jitter_probability) ||
      !absl::SimpleAtod(parts[1], &options->jitter_factor)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " '", text, "' must be PROBABILITY:FACTOR, e.g. 0.1:4"));
  }
  return absl::OkStatus();
}

absl::Status ParsePause(absl::string_view source, absl::string_view text, DelayOptions* options) {
  if (text.empty()) return absl::OkStatus();
  const std::vector<std::string> parts = absl::StrSplit(text, ':');
  double seconds = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &options->pause_step) ||
      !absl::SimpleAtod(parts[1], &seconds) || options->pause_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " '", text, "' must be STEP:SECONDS, e.g. 100:5"));
  }
  options->pause = absl::Seconds(seconds);
  return absl::OkStatus();
}

bool DelayInjector::Jittered(int64_t step) const {
  if (options_.jitter_probability <= 0.0) return false;
  Rng rng = Rng::FromKeys(
      {options_.seed, static_cast<uint64_t>(options_.rank), static_cast<uint64_t>(step), 0x717});
  return rng.NextFloat() < options_.jitter_probability;
}

absl::Duration DelayInjector::DelayFor(int64_t step, absl::Duration work) {
  normal_step_ = primed_ ? normal_step_ * (1.0 - kSmoothing) + work * kSmoothing : work;
  primed_ = true;
  absl::Duration delay = normal_step_ * (options_.slowdown - 1.0);
  if (Jittered(step)) delay += normal_step_ * (options_.jitter_factor - 1.0);
  if (step == options_.pause_step) delay += options_.pause;
  return delay;
}

}  // namespace ps
