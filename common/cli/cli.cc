#include "common/cli/cli.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <optional>
#include <string>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"

namespace ps {

namespace {

bool IsOurFlagFile(absl::string_view file) {
  return absl::EndsWith(file, "_main.cc") || absl::EndsWith(file, "_flags.cc");
}

// What --help lists: the binaries' flags and the benchmarks' own (bench/*_bench.cc), which take
// no PS_<NAME> variables (they run by hand, not in containers).
bool IsHelpFlagFile(absl::string_view file) {
  return IsOurFlagFile(file) || absl::EndsWith(file, "_bench.cc");
}

// Sets every flag of ours that has a PS_<NAME> environment variable; exits 2 on a bad value.
void FlagsFromEnvironment(const char* program) {
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!IsOurFlagFile(flag->Filename())) continue;
    const std::string variable = "PS_" + absl::AsciiStrToUpper(name);
    const char* value = std::getenv(variable.c_str());
    if (value == nullptr) continue;
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      std::fprintf(stderr, "%s: environment variable %s='%s': %s\n", program, variable.c_str(),
                   value, error.c_str());
      std::exit(kExitConfigurationError);
    }
  }
}

}  // namespace

void RefuseBadCommandLineFlags(int argc, char** argv) {
  constexpr absl::string_view kUsageFlags[] = {"help",        "helpfull", "helpshort",
                                               "helppackage", "version",  "only_check_args",
                                               "helpon",      "helpmatch"};
  constexpr absl::string_view kParserFlags[] = {"flagfile", "fromenv", "tryfromenv", "undefok"};
  const auto in = [](const auto& names, absl::string_view name) {
    return std::find(std::begin(names), std::end(names), name) != std::end(names);
  };
  const auto name_of = [](absl::string_view arg) {
    arg.remove_prefix(absl::StartsWith(arg, "--") ? 2 : 1);
    return arg.substr(0, arg.find('='));
  };
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg(argv[i]);
    if (arg == "--") break;
    if (arg.size() >= 2 && arg[0] == '-' && in(kParserFlags, name_of(arg))) return;
  }
  const auto refuse = [](const std::string& message) {
    std::fprintf(stderr, "ERROR: %s\n", message.c_str());
    std::exit(kExitConfigurationError);
  };
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg(argv[i]);
    if (arg == "--") return;
    if (arg.size() < 2 || arg[0] != '-') continue;  // a positional argument
    const std::string name(name_of(arg));
    if (in(kUsageFlags, name)) continue;
    const size_t equals = arg.find('=');
    std::optional<std::string> value;
    if (equals != absl::string_view::npos) value = std::string(arg.substr(equals + 1));
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>() && !value.has_value()) {
        std::string unused;
        negated->ParseFrom("false", &unused);
        continue;
      }
    }
    if (flag == nullptr) refuse("Unknown command line flag '" + name + "'");
    if (!value.has_value() && flag->IsOfType<bool>()) value = "true";
    if (!value.has_value()) {  // "--name value"
      if (i + 1 == argc) refuse("Missing the value for the flag '" + name + "'");
      value = argv[++i];
    }
    std::string error;
    if (!flag->ParseFrom(*value, &error)) refuse(error);
  }
}

int ExitCodeOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return kExitConfigurationError;
    default:
      return 1;
  }
}

std::vector<std::string> ParseCommandLine(int argc, char** argv, const char* usage) {
  absl::FlagsUsageConfig config;
  config.contains_help_flags = IsHelpFlagFile;
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
  FlagsFromEnvironment(argc > 0 ? argv[0] : "ps");
  RefuseBadCommandLineFlags(argc, argv);
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  return std::vector<std::string>(rest.begin() + 1, rest.end());
}

void ParseFlags(int argc, char** argv, const char* usage) {
  const std::vector<std::string> rest = ParseCommandLine(argc, argv, usage);
  if (rest.empty()) return;
  const std::string program = std::filesystem::path(argc > 0 ? argv[0] : "ps").filename();
  std::fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", program.c_str(),
               rest[0].c_str());
  std::exit(kExitConfigurationError);
}

std::vector<std::string> ForwardedFlags(const std::vector<std::string>& names) {
  std::vector<std::string> args;
  for (const std::string& name : names) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) {
      std::fprintf(stderr, "internal error: no flag --%s to pass on\n", name.c_str());
      std::abort();
    }
    args.push_back("--" + name + "=" + flag->CurrentValue());
  }
  return args;
}

namespace {

// The flags defined in `file`, in name order; a file that defines none is a bug.
std::vector<const absl::CommandLineFlag*> FlagsDefinedIn(const std::string& file) {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    const std::string where = flag->Filename();
    if (where == file || absl::EndsWith(where, "/" + file)) flags.push_back(flag);
  }
  if (flags.empty()) {
    std::fprintf(stderr, "internal error: no flags defined in %s\n", file.c_str());
    std::abort();
  }
  std::sort(flags.begin(), flags.end(),
            [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) {
              return a->Name() < b->Name();
            });
  return flags;
}

}  // namespace

std::vector<std::string> ForwardedFlagsOf(const std::string& file) {
  std::vector<std::string> names;
  for (const absl::CommandLineFlag* flag : FlagsDefinedIn(file)) {
    names.push_back(std::string(flag->Name()));
  }
  return ForwardedFlags(names);
}

std::vector<std::string> ChangedFlagsOf(const std::string& file) {
  std::vector<std::string> names;
  for (const absl::CommandLineFlag* flag : FlagsDefinedIn(file)) {
    if (flag->CurrentValue() != flag->DefaultValue()) names.push_back(std::string(flag->Name()));
  }
  return names;
}

std::optional<int> OrdinalOfName(const std::string& name) {
  const size_t dash = name.rfind('-');
  if (dash == std::string::npos || dash + 1 == name.size()) return std::nullopt;
  int ordinal = 0;
  const std::string digits = name.substr(dash + 1);
  if (digits.find_first_not_of("0123456789") != std::string::npos ||
      !absl::SimpleAtoi(digits, &ordinal)) {
    return std::nullopt;
  }
  return ordinal;
}

std::optional<int> IndexFromEnvironment(const char* name, bool ordinal_of_name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  std::optional<int> index;
  int number = 0;
  if (ordinal_of_name) {
    index = OrdinalOfName(value);
  } else if (absl::SimpleAtoi(value, &number) && number >= 0) {
    index = number;
  }
  if (!index.has_value()) {
    std::fprintf(stderr, "environment variable %s='%s' does not give an index%s\n", name, value,
                 ordinal_of_name ? " (expected NAME-N, e.g. ps-3)" : "");
    std::exit(kExitConfigurationError);
  }
  return index;
}

int IndexFromFlagOrEnvironment(const char* flag, int value, const char* name,
                               bool ordinal_of_name) {
  if (value >= 0) return value;
  if (value != -1) {
    std::fprintf(stderr, "--%s %d: give an index >= 0, or -1 to take it from $%s\n", flag, value,
                 name);
    std::exit(kExitConfigurationError);
  }
  return IndexFromEnvironment(name, ordinal_of_name).value_or(0);
}

}  // namespace ps
