#ifndef PS_WORKER_WORKER_FLAGS_H_
#define PS_WORKER_WORKER_FLAGS_H_

// The flags of ps_worker that ps_launch also takes: defined once, here, and passed on to every
// worker by ps_launch (ForwardedFlagsOf("worker/worker_flags.cc") passes every flag this file's
// .cc defines). The schedule (--overlap, --async_push, --push_pull, --priority,
// --priority_min_part), the transport (--push_encoding, --topk_ratio, --pull_encoding,
// --chunk_mib, --connections, --split_lone_pulls, --split_lone_pushes, --push_pull_split_mib;
// ps_bench_transport takes these too), the device, evaluation and time budget, jitter,
// and a fault switch for tests. For main() files only.

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, device);
ABSL_DECLARE_FLAG(bool, overlap);
ABSL_DECLARE_FLAG(bool, async_push);
ABSL_DECLARE_FLAG(bool, push_pull);
ABSL_DECLARE_FLAG(bool, priority);
ABSL_DECLARE_FLAG(int64_t, priority_min_part);
ABSL_DECLARE_FLAG(std::string, push_encoding);
ABSL_DECLARE_FLAG(double, topk_ratio);
ABSL_DECLARE_FLAG(std::string, pull_encoding);
ABSL_DECLARE_FLAG(double, chunk_mib);
ABSL_DECLARE_FLAG(int32_t, connections);
ABSL_DECLARE_FLAG(bool, split_lone_pulls);
ABSL_DECLARE_FLAG(bool, split_lone_pushes);
ABSL_DECLARE_FLAG(double, push_pull_split_mib);
ABSL_DECLARE_FLAG(bool, fault_duplicate_pushes);
ABSL_DECLARE_FLAG(double, clip_norm);
ABSL_DECLARE_FLAG(int64_t, eval_every);
ABSL_DECLARE_FLAG(bool, eval_inline);
ABSL_DECLARE_FLAG(double, max_seconds);
ABSL_DECLARE_FLAG(std::string, jitter);

#endif  // PS_WORKER_WORKER_FLAGS_H_
