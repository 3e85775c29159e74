#ifndef PS_DEPLOY_LOCAL_LAUNCH_FLAGS_H_
#define PS_DEPLOY_LOCAL_LAUNCH_FLAGS_H_

// ps_launch's own flags about the cluster it runs (its shape, the run folder, the faults it
// injects per worker, TLS); read by cluster_spec.cc. The flags it passes on are the binaries'.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(int32_t, shards);
ABSL_DECLARE_FLAG(int32_t, workers);
ABSL_DECLARE_FLAG(std::vector<std::string>, straggler);
ABSL_DECLARE_FLAG(std::vector<std::string>, pause_worker);
ABSL_DECLARE_FLAG(std::string, metrics_dir);
ABSL_DECLARE_FLAG(std::string, bin_dir);
ABSL_DECLARE_FLAG(bool, replayable);
ABSL_DECLARE_FLAG(bool, save_weights);
ABSL_DECLARE_FLAG(std::string, checkpoint_root);
ABSL_DECLARE_FLAG(std::string, tls_dir);
ABSL_DECLARE_FLAG(bool, serve_metrics);
ABSL_DECLARE_FLAG(std::string, python);
ABSL_DECLARE_FLAG(int64_t, python_batch);
ABSL_DECLARE_FLAG(std::string, python_bin);

#endif  // PS_DEPLOY_LOCAL_LAUNCH_FLAGS_H_
