#include "deploy/local/launch_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(int32_t, shards, 2, "Number of ps_server shards.");
ABSL_FLAG(int32_t, workers, 2, "Number of ps_worker processes.");
ABSL_FLAG(std::vector<std::string>, straggler, {},
          "RANK:FACTOR makes every step of that worker take FACTOR times its normal time; "
          "repeatable, or comma-separated.");
ABSL_FLAG(std::vector<std::string>, pause_worker, {},
          "RANK:STEP:SECONDS pauses that worker once after STEP; repeatable.");
ABSL_FLAG(std::string, metrics_dir, "",
          "Where summary.json and the per-worker JSON lines go (default runs/<time>).");
ABSL_FLAG(std::string, bin_dir, "",
          "Folder of ps_server and ps_worker (default: beside ps_launch).");
ABSL_FLAG(bool, replayable, false,
          "Shards record the order they apply gradients in (<metrics_dir>/ps-N.updates), and "
          "<metrics_dir>/replay.cmd holds the ps_replay command that reproduces the run.");
ABSL_FLAG(bool, save_weights, false,
          "Also write the final weights as raw float32 to <metrics_dir>/weights.f32.");
ABSL_FLAG(std::string, checkpoint_root, "",
          "Shard N's checkpoints go to <root>/ps-N, its --checkpoint_dir (restored from there at "
          "start): see ps_server.");
ABSL_FLAG(std::string, tls_dir, "",
          "Mutual TLS: a folder made by scripts/make_test_certs.sh (ca.pem, server.pem/.key, "
          "client.pem/.key); the shards require client certificates.");
ABSL_FLAG(bool, serve_metrics, false,
          "Every shard and worker serves Prometheus metrics on a free port, written to "
          "<metrics_dir>/<name>.metrics_port.");
ABSL_FLAG(std::string, python, "",
          "Run this Python script as each worker instead of ps_worker (ps_launch --python "
          "SCRIPT [-- ARGS]): the shards start as usual, and each worker runs SCRIPT with "
          "PS_SERVERS, PS_RANK, PS_NUM_WORKERS and the security settings in its environment and "
          "build/python on its PYTHONPATH, for `import ps_train.torch` (docs/python.md). The "
          "script evaluates its own model; the job fails when a worker does.");
ABSL_FLAG(int64_t, python_batch, 0,
          "--python: the samples each push of the script carries (its batch x accumulation), "
          "which the launcher cannot see; with it, --base_batch's --effective_batch is derived "
          "as for ps_worker (under BSP, times the pushes a round averages). 0: not given.");
ABSL_FLAG(std::string, python_bin, "/usr/bin/python3",
          "--python: the interpreter (Debian's python3 is the one that sees python3-torch).");
