#ifndef PS_WORKER_TRANSFER_FLAGS_H_
#define PS_WORKER_TRANSFER_FLAGS_H_

// How a client cuts its transfers, read from ps_worker's transport flags (--chunk_mib,
// --connections, --split_lone_pulls, --split_lone_pushes, --push_pull_split_mib; defined in
// worker/worker_flags.cc): one reading for ps_worker and ps_bench_transport, which take them
// alike. For main() files only.

#include "absl/status/status.h"
#include "worker/grpc_parameter_client.h"

namespace ps {

// INVALID_ARGUMENT when --chunk_mib or --push_pull_split_mib is negative (or NaN) or
// --connections below 1.
absl::Status CheckTransferFlags();

// Sets `o`'s chunking and splitting fields from the flags; CheckTransferFlags's error (and `o`
// unchanged) when they are out of range.
absl::Status SetTransferFromFlags(GrpcClientOptions& o);

}  // namespace ps

#endif  // PS_WORKER_TRANSFER_FLAGS_H_
