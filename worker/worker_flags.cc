#include "worker/worker_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, device, "cpu",
          "Compute device: cpu, cuda:N (GPU N), or cuda: GPU (rank mod the GPUs visible), so the "
          "workers of one host spread over its GPUs.");
ABSL_FLAG(bool, overlap, false,
          "SSP/ASP: pull the next step's weights while this step computes and pushes (hides "
          "communication; adds up to one update of staleness). Ignored under BSP.");
ABSL_FLAG(bool, async_push, false,
          "SSP/ASP: push each step's gradient on another thread while the next step pulls and "
          "computes (adds up to one update of staleness). Ignored under BSP.");
ABSL_FLAG(bool, push_pull, true,
          "Push each step's gradient and pull the next step's weights in one round trip per "
          "shard (steps that run one after another: not with --overlap, --async_push or "
          "--priority). Same results; false: two calls.");
ABSL_FLAG(bool, priority, false,
          "Priority scheduling, any mode: pull weights layer by layer, first layer first, and "
          "start each layer's forward as soon as its weights arrived; push each layer's gradient "
          "as soon as backward produced it, last layer first. Not with --overlap or injected "
          "delays.");
ABSL_FLAG(int64_t, priority_min_part, 16384,
          "--priority: a layer with fewer parameters travels with the layer before it (0: one "
          "part per layer; the first layer always travels alone).");
ABSL_FLAG(std::string, push_encoding, "f32",
          "How gradients travel: f32, bf16, fp16, or topk (top-k sparsification with error "
          "feedback, keeping --topk_ratio of each shard's elements per step).");
ABSL_FLAG(double, topk_ratio, 0.01, "--push_encoding topk: share of elements sent per step.");
ABSL_FLAG(std::string, pull_encoding, "f32", "How weights travel: f32, bf16 or fp16.");
ABSL_FLAG(double, chunk_mib, 0,
          "Large slices: each shard's range travels in calls of at most this many MiB, all in "
          "flight together (0: one call per shard). 4 doubled 64 MiB pulls here. Under SSP and ASP "
          "the shard stages the chunks of a push, a slice per worker that sends them.");
ABSL_FLAG(int32_t, connections, 1, "TCP connections per shard over which the chunks spread.");
ABSL_FLAG(bool, split_lone_pulls, true,
          "With --chunk_mib 0, under BSP: a pull of 512 KiB or more from the worker's only shard, "
          "payload in the messages, travels as calls of at most 2 MiB over two connections (one "
          "HTTP/2 stream leaves both ends waiting on each other).");
ABSL_FLAG(bool, split_lone_pushes, true,
          "The same for pushes without sparse rows: the shard gathers BSP pieces in the worker's "
          "round buffer, so they cost it no staging memory. A PushPull of --push_pull_split_mib "
          "or more then goes as a split push and a split pull, a smaller one whole.");
ABSL_FLAG(double, push_pull_split_mib, 4,
          "With --split_lone_pushes: the size from which a PushPull with the only shard goes as a "
          "split push and a split pull (4 lies between a 0.9 MiB model that did not gain and a "
          "12.8 MB one that did; 0: always).");
ABSL_FLAG(bool, fault_duplicate_pushes, false,
          "Fault injection for tests: send every push twice and fail unless the second comes "
          "back as a duplicate from every shard.");
ABSL_FLAG(double, clip_norm, 0,
          "Clip each step's whole gradient (dense and rows) to this L2 norm before pushing it "
          "(0: off); not with --priority, which pushes layers before the norm is known.");
ABSL_FLAG(int64_t, eval_every, 0,
          "Rank 0 also measures test accuracy every this many steps (0: only at epoch ends).");
ABSL_FLAG(bool, eval_inline, false,
          "Rank 0 evaluates on its training thread under SSP and ASP too, pausing its training "
          "while the others push (its next gradient is then stale by their updates meanwhile). "
          "Default: a copy of the model on the CPU evaluates beside training. BSP always "
          "evaluates inline, where the others wait at the round anyway.");
ABSL_FLAG(double, max_seconds, 0,
          "Stop training successfully after this many seconds (0: run every epoch); the worker "
          "then leaves the job, so that no other worker waits for it.");
ABSL_FLAG(std::string, jitter, "",
          "PROBABILITY:FACTOR: each step, with that probability, takes FACTOR times the normal "
          "step time (seeded by --seed, rank and step).");
