#ifndef PS_COMMON_BASE_ENUM_NAMES_H_
#define PS_COMMON_BASE_ENUM_NAMES_H_

// The names of an enum's values in one table, for parsing flags and for printing: each enum's
// Parse and Name functions look it up instead of repeating the names in a chain of ifs and a
// switch.
//
//   constexpr EnumName<Mode> kModeNames[] = {{Mode::kA, "a"}, {Mode::kB, "b"}};
//   NameIn(kModeNames, Mode::kB)          -> "b"
//   ParseIn(kModeNames, "c", "mode")      -> INVALID_ARGUMENT "unknown mode 'c' (a|b)"

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ps {

template <typename E>
struct EnumName {
  E value;
  const char* name;  // a value may have several (aliases); the first is its name
};

// The first name of `value` in `table`; "unknown" when it has none.
template <typename E, size_t N>
const char* NameIn(const EnumName<E> (&table)[N], E value) {
  for (const EnumName<E>& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return "unknown";
}

// The value `name` names in `table`; INVALID_ARGUMENT naming `what` and every name otherwise.
template <typename E, size_t N>
absl::StatusOr<E> ParseIn(const EnumName<E> (&table)[N], absl::string_view name,
                          absl::string_view what) {
  std::string names;
  for (const EnumName<E>& entry : table) {
    if (entry.name == name) return entry.value;
    absl::StrAppend(&names, names.empty() ? "" : "|", entry.name);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown ", what, " '", name, "' (", names, ")"));
}

}  // namespace ps

#endif  // PS_COMMON_BASE_ENUM_NAMES_H_
