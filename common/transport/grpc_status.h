#ifndef PS_COMMON_TRANSPORT_GRPC_STATUS_H_
#define PS_COMMON_TRANSPORT_GRPC_STATUS_H_

// Conversion between absl::Status and grpc::Status at the edge of the service and the client.
// The two share the canonical codes 0..16, so the code crosses as a cast.

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace ps {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

// `what` names the call for the message, e.g. "Pull from ps-1 (localhost:5000)".
inline absl::Status FromGrpcStatus(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      std::string(what) + ": " + s.error_message());
}

}  // namespace ps

#endif  // PS_COMMON_TRANSPORT_GRPC_STATUS_H_
