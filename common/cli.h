#ifndef PS_COMMON_CLI_H_
#define PS_COMMON_CLI_H_

// Command-line parsing shared by the binaries' main() files (and only them).

#include <string>
#include <vector>

namespace ps {

// Sets the usage text, makes --help list the flags defined in *_main.cc and *_flags.cc files,
// and parses argv.
// Returns the positional arguments after the program name.
std::vector<std::string> ParseCommandLine(int argc, char** argv, const char* usage);

}  // namespace ps

#endif  // PS_COMMON_CLI_H_
