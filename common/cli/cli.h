#ifndef PS_COMMON_CLI_CLI_H_
#define PS_COMMON_CLI_CLI_H_

// Command-line parsing shared by the binaries' main() files (and only them).

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ps {

// Every binary's exit code for a configuration error: a bad flag or variable, data or a file the
// flags name that cannot be read. Supervisors never restart a process that exits with it
// (ps_launch's --restart_workers, the Kubernetes Job's podFailurePolicy), and ps_launch passes a
// child's on as its own: a restart cannot fix it.
inline constexpr int kExitConfigurationError = 2;

// The exit code of a binary that could not start or finish on its own inputs: 0 for OK,
// kExitConfigurationError for INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED and UNAUTHENTICATED
// (a bad flag, a file or folder the flags name that is missing or cannot be made, credentials the
// servers refuse), 1 for anything else.
int ExitCodeOf(const absl::Status& status);

// Sets the usage text, makes --help list the flags defined in *_main.cc and *_flags.cc files,
// and parses argv.
//
// Every such flag can also come from the environment: PS_<NAME IN CAPITALS>, e.g. PS_NUM_SHARDS=2
// for --num_shards (what containers and Kubernetes manifests use). The command line wins over the
// environment. A value that does not parse exits with code 2 and a message naming the variable.
// So does an unknown flag or a bad value on the command line (Abseil's message; Abseil alone
// would exit 1). Returns the positional arguments after the program name.
std::vector<std::string> ParseCommandLine(int argc, char** argv, const char* usage);

// Checks every flag on the command line, names and values, and exits 2 with Abseil's own message
// on an unknown flag, a bad value or a missing one; sets the values it checks. Abseil exits 1 on
// those, and this project's binaries exit 2 on bad input, so that supervisors tell a
// configuration error (never restarted: ps_launch's --restart_workers, the Kubernetes Job's
// podFailurePolicy) from a crash. Arguments after "--" are left alone; Abseil's usage flags
// (--help, --only_check_args, ...) are Abseil's to handle; with --flagfile, --fromenv, --tryfromenv
// or --undefok, Abseil's parser decides alone. ParseCommandLine calls it first.
void RefuseBadCommandLineFlags(int argc, char** argv);

// ParseCommandLine for a binary that takes flags only: a positional argument exits with code 2
// and a message naming it.
void ParseFlags(int argc, char** argv, const char* usage);

// "--NAME=VALUE" for each flag named, with its current value (its default unless set): how a
// launcher passes flags it shares with the binaries it starts, so each flag keeps one definition
// and one default. Every name must be a flag linked into this binary (a bug otherwise).
std::vector<std::string> ForwardedFlags(const std::vector<std::string>& names);
// ForwardedFlags of every flag defined in the source file whose path ends with `file` (e.g.
// "worker/worker_flags.cc"), in name order: a launcher passes on a group of a binary's flags
// without a list of names to keep in step. A file that defines none is a bug.
std::vector<std::string> ForwardedFlagsOf(const std::string& file);
// The names of the flags defined in `file` (as ForwardedFlagsOf) whose value is not their
// default, in name order: what a launcher that will not pass that group on would drop.
std::vector<std::string> ChangedFlagsOf(const std::string& file);

// The ordinal a StatefulSet gives its pods: 3 for "ps-3" (the digits after the last '-'); empty
// when the name does not end that way.
std::optional<int> OrdinalOfName(const std::string& name);

// The number in the environment variable `name` (e.g. JOB_COMPLETION_INDEX, set on the pods of
// an Indexed Job), or the ordinal of the pod name in it (e.g. POD_NAME of a StatefulSet pod).
// Empty when unset; INVALID values exit with code 2 and a message.
std::optional<int> IndexFromEnvironment(const char* name, bool ordinal_of_name);

// An index flag's value (`flag` names it: --rank, --shard_id): `value` when it is >= 0; at -1 the
// index the environment variable `name` gives (IndexFromEnvironment), else 0. Below -1 exits with
// code 2 and a message, as a bad value in the environment does.
int IndexFromFlagOrEnvironment(const char* flag, int value, const char* name, bool ordinal_of_name);

}  // namespace ps

#endif  // PS_COMMON_CLI_CLI_H_
