#ifndef PS_COMMON_BASE_STATUS_MACROS_H_
#define PS_COMMON_BASE_STATUS_MACROS_H_

// The installed abseil (20220623) has no RETURN_IF_ERROR / ASSIGN_OR_RETURN. These local macros use
// the same names and meaning so they can be swapped for abseil's once it ships them.

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PS_STATUS_CONCAT_INNER_(a, b) a##b
#define PS_STATUS_CONCAT_(a, b) PS_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the enclosing function when not OK.
#define RETURN_IF_ERROR(expr)                                          \
  do {                                                                 \
    ::absl::Status ps_status_macro_status_ = (expr);                   \
    if (!ps_status_macro_status_.ok()) return ps_status_macro_status_; \
  } while (false)

// `ASSIGN_OR_RETURN(auto x, F())` declares `x` from the value of the StatusOr returned by F(),
// or returns F()'s status from the enclosing function.
#define ASSIGN_OR_RETURN(lhs, expr) \
  PS_ASSIGN_OR_RETURN_IMPL_(PS_STATUS_CONCAT_(ps_statusor_, __LINE__), lhs, expr)
#define PS_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                              \
  if (!statusor.ok()) return statusor.status();        \
  lhs = std::move(statusor).value()

#endif  // PS_COMMON_BASE_STATUS_MACROS_H_
