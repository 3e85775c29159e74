#include "common/cli.h"

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace ps {

std::vector<std::string> ParseCommandLine(int argc, char** argv, const char* usage) {
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "_main.cc") || absl::EndsWith(file, "_flags.cc");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  return std::vector<std::string>(rest.begin() + 1, rest.end());
}

}  // namespace ps
