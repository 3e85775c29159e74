#include "worker/trainer.h"

#include <algorithm>
#include <condition_variable>
#include <future>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"
#include "worker/batch_plan.h"
#include "worker/step_gradient.h"

namespace ps {

namespace {

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// Renews the worker's leases every lease/3 until destroyed.
class HeartbeatThread {
 public:
  HeartbeatThread(ParameterClient& client, absl::Duration lease) {
    const auto period = absl::ToChronoMilliseconds(std::max(lease / 3, absl::Milliseconds(10)));
    thread_ = std::thread([this, &client, period] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, period, [this] { return done_; })) {
        lock.unlock();
        absl::Status s = client.Heartbeat();
        if (!s.ok()) spdlog::warn("heartbeat: {}", s.ToString());
        lock.lock();
      }
    });
  }
  ~HeartbeatThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

absl::StatusOr<BatchStats> EvaluateDataset(Model& model, Device& device, const float* params,
                                           const Dataset& data) {
  const int batch = model.max_batch();
  const int64_t features = data.features();
  std::vector<float> x(static_cast<size_t>(batch) * features);
  std::vector<int32_t> y(batch);
  std::vector<int32_t> indices(batch);
  ASSIGN_OR_RETURN(DeviceBuffer x_dev, device.Allocate(x.size() * sizeof(float)));
  ASSIGN_OR_RETURN(DeviceBuffer y_dev, device.Allocate(y.size() * sizeof(int32_t)));
  BatchStats total;
  for (int64_t begin = 0; begin < data.size(); begin += batch) {
    const int n = static_cast<int>(std::min<int64_t>(batch, data.size() - begin));
    std::iota(indices.begin(), indices.begin() + n, static_cast<int32_t>(begin));
    data.Gather(indices.data(), n, x.data(), y.data());
    RETURN_IF_ERROR(device.CopyToDevice(x.data(), sizeof(float) * n * features, x_dev.as<float>()));
    RETURN_IF_ERROR(device.CopyToDevice(y.data(), sizeof(int32_t) * n, y_dev.as<int32_t>()));
    ASSIGN_OR_RETURN(BatchStats s,
                     model.Evaluate(params, x_dev.as<float>(), y_dev.as<int32_t>(), n));
    total.loss_sum += s.loss_sum;
    total.correct += s.correct;
    total.count += s.count;
  }
  return total;
}

Trainer::Trainer(const TrainerOptions& options, Model& model, Device& device,
                 ParameterClient& client, const Dataset& train, const Dataset* test,
                 JsonLinesWriter* metrics, std::function<void(const EpochReport&)> on_epoch)
    : options_(options),
      model_(model),
      device_(device),
      client_(client),
      train_(train),
      test_(test),
      metrics_(metrics),
      on_epoch_(std::move(on_epoch)) {}

std::vector<KeyRange> MergeParts(const std::vector<KeyRange>& layers, int64_t min_part) {
  std::vector<KeyRange> parts;
  for (const KeyRange& layer : layers) {
    if (parts.size() >= 2 && layer.size() < min_part) {  // never into the first layer's part
      parts.back().end = layer.end;
    } else {
      parts.push_back(layer);
    }
  }
  return parts;
}

absl::Status ValidateTrainerOptions(const TrainerOptions& options) {
  if (options.priority_min_part < 0) {
    return absl::InvalidArgumentError("the smallest priority part must be >= 0 parameters");
  }
  RETURN_IF_ERROR(ValidateDelayOptions(options.delays));
  if (options.priority) {
    const DelayOptions& d = options.delays;
    if (options.overlap || options.async_push) {
      return absl::InvalidArgumentError(
          "priority scheduling and overlap or asynchronous pushes are alternatives: choose one");
    }
    if (d.slowdown != 1.0 || d.jitter_probability > 0.0 || d.pause_step >= 0) {
      return absl::InvalidArgumentError(
          "priority scheduling sends gradients while backward runs, so injected delays (which "
          "stand for slower computation before the push) cannot apply: drop one or the other");
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::Run(const std::atomic<bool>& stop) {
  RETURN_IF_ERROR(ValidateTrainerOptions(options_));
  DelayOptions delay_options = options_.delays;
  delay_options.seed = options_.seed;
  delay_options.rank = options_.rank;
  DelayInjector delays(delay_options);
  absl::Duration last_push = absl::ZeroDuration();
  ASSIGN_OR_RETURN(ClusterInfo cluster, client_.Register(options_.rank, options_.register_timeout));
  BatchPlanOptions plan_options;
  plan_options.dataset_size = train_.size();
  plan_options.num_workers = cluster.num_workers;
  plan_options.rank = options_.rank;
  plan_options.batch_size = options_.batch_size;
  plan_options.accumulate = options_.accumulate;
  plan_options.seed = options_.seed;
  ASSIGN_OR_RETURN(
      std::unique_ptr<StepGradient> gradient,
      StepGradient::Create(model_, device_, train_, plan_options, options_.overlap_copies));
  const BatchPlan& plan = gradient->plan();
  const int64_t total_steps = plan.steps_per_epoch() * options_.epochs;
  if (cluster.resume_clock >= total_steps) {
    // Not an error of this process: it has nothing to do. Over a finished job the shards flag
    // the start, and the job's evaluation refuses to present the old result as a new one.
    spdlog::error(
        "rank {}: nothing to train: the shards hold step {} of this worker's {}{}. To train "
        "afresh, start fresh shards (docker-compose: `down -v`; ps_launch: another "
        "--checkpoint_dir)",
        options_.rank, cluster.resume_clock, total_steps,
        cluster.job_finished ? " (a job that has finished)" : "");
  }
  // The work this worker owes, declared before its first push (and with every later Register and
  // Heartbeat): the shards account for it, and an automatic cosine schedule ends with it. A
  // failed beat is not fatal: the next one declares it again.
  client_.SetWorkPlan(total_steps, int64_t{options_.batch_size} * options_.accumulate);
  if (absl::Status s = client_.Heartbeat(); !s.ok()) {
    spdlog::warn("rank {}: declaring the work plan: {}", options_.rank, s.ToString());
  }

  const int64_t n = model_.layout().total();
  // Overlap (SSP and ASP only): the pull of step c+1 runs on another thread into a second buffer
  // while step c computes and pushes. BSP's pull of c+1 needs this worker's push of c, so there
  // is nothing to gain there.
  const bool overlap = options_.overlap && cluster.mode != ConsistencyMode::kBsp;
  // Asynchronous pushes (SSP and ASP only): step c's push travels while step c+1 pulls and
  // computes into a second gradient buffer; it is settled (and step c accounted for) after that
  // compute, before step c+1's push, so a worker's pushes still reach the shards in clock order.
  const bool async_push = options_.async_push && cluster.mode != ConsistencyMode::kBsp;
  const bool double_buffered = overlap || async_push;
  const size_t n_size = static_cast<size_t>(n);
  // Weights and gradients live in the transport's own buffers when it has them (shared memory
  // with the shards): pulls land and pushes leave with no copy on this side, and a
  // host-addressable (CPU) device computes in them directly. A GPU device pins them, so its
  // copies to and from them are DMA transfers. Otherwise they live in the device's preferred
  // host memory (pinned for CUDA). Double buffers take the transport's second set too, or
  // neither (a taken area is no bounce buffer for a buffer of our own).
  absl::Span<float> params, grads, prefetch_params, spare_grads;
  {
    const TransportBuffers second =
        double_buffered ? client_.TakeTransportBuffers(1) : TransportBuffers{};
    if (!double_buffered || !second.weights.empty() || !second.gradient.empty()) {
      const TransportBuffers first = client_.TakeTransportBuffers(0);
      if (first.weights.size() == n_size && (!double_buffered || second.weights.size() == n_size)) {
        params = first.weights;
        if (overlap) prefetch_params = second.weights;
      }
      if (first.gradient.size() == n_size &&
          (!double_buffered || second.gradient.size() == n_size)) {
        grads = first.gradient;
        if (async_push) spare_grads = second.gradient;
      }
    }
  }
  // The taken buffers lie in the transport's one region: one registration pins them all (pinning
  // ranges that share a page twice would fail). Unpinned when Run returns, before the client
  // unmaps the region.
  DeviceBuffer pinned;
  if (!device_.host_addressable()) {
    const float* first = nullptr;
    const float* last = nullptr;
    for (absl::Span<float> taken : {params, grads, prefetch_params, spare_grads}) {
      if (taken.empty()) continue;
      if (first == nullptr || taken.data() < first) first = taken.data();
      if (last == nullptr || taken.data() + taken.size() > last) last = taken.data() + taken.size();
    }
    if (first != nullptr) {
      absl::StatusOr<DeviceBuffer> pin = device_.RegisterHostMemory(
          const_cast<float*>(first), static_cast<size_t>(last - first) * sizeof(float));
      if (pin.ok()) {
        pinned = *std::move(pin);
      } else {
        spdlog::warn(
            "rank {}: shared buffers stay unpinned, so copies to the device are slower: {}",
            options_.rank, pin.status().ToString());
      }
    }
  }
  // The buffers the transport did not provide.
  DeviceBuffer params_host, grads_host, prefetch_host, spare_grads_host;
  const auto own = [&](DeviceBuffer& host, absl::Span<float>& span) -> absl::Status {
    if (!span.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(host, device_.AllocateHost(n * sizeof(float)));
    span = absl::Span<float>(host.as<float>(), n);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(own(params_host, params));
  RETURN_IF_ERROR(own(grads_host, grads));
  if (overlap) RETURN_IF_ERROR(own(prefetch_host, prefetch_params));
  if (async_push) RETURN_IF_ERROR(own(spare_grads_host, spare_grads));
  // A push in flight; pipelined, it also pulls step `pull_clock` into `weights`.
  struct InFlightPush {
    int64_t step = 0;
    PullStats pulled;
    BatchStats step_stats;
    absl::Time t0, t1, t2, t2s;
    int64_t pull_clock = -1;  // -1: a push alone
    absl::Span<float> weights;
    std::future<absl::StatusOr<PushPullStats>> result;
  };
  std::optional<InFlightPush> in_flight;
  // Declared after the buffers a push reads, so destroyed before them: whatever way Run returns,
  // no push is left reading freed memory.
  struct WaitForPush {
    std::optional<InFlightPush>& push;
    ~WaitForPush() {
      if (push.has_value() && push->result.valid()) push->result.wait();
    }
  } wait_for_push{in_flight};
  std::future<absl::StatusOr<PullStats>> prefetch;
  int64_t prefetch_step = -1;
  // PushPull, steps one after another: each push brings the next step's weights into `params`.
  const bool push_pull = options_.push_pull && !overlap && !async_push && !options_.priority;
  // PushPull with overlap and asynchronous pushes: one call per step, in flight while the next
  // step computes. Step c's call pushes c and pulls c+2 into the buffer step c computed from, while
  // step c+1 computes on the weights step c-1's call brought. The pull of c+2 right after the
  // push of c needs the shards to allow this worker a clock ahead of its own (SSP bound >= 1).
  const bool pipelined = options_.push_pull && overlap && async_push && !options_.priority &&
                         !(cluster.mode == ConsistencyMode::kSsp && cluster.staleness < 1);
  // The weights of step `carried_step` (-1: none) are in `carried_weights` (`params` or
  // `prefetch_params`), pulled with an earlier push. Anything else that writes those buffers
  // (an evaluation, a rejoin) drops them.
  int64_t carried_step = -1;
  PullStats carried;
  absl::Span<float> carried_weights;
  // Settles the calls in flight (a prefetch, an asynchronous push) before anything else talks to
  // the shards (rejoin, errors). A push settled here is not accounted for: the worker resumes at
  // the clock the shards report, which counts it if it landed.
  auto drain_prefetch = [&] {
    if (prefetch.valid()) prefetch.get().IgnoreError();
    prefetch_step = -1;
  };
  auto drain_calls = [&] {
    drain_prefetch();
    carried_step = -1;
    if (in_flight.has_value()) {
      in_flight->result.get().IgnoreError();
      in_flight.reset();
    }
  };
  if (!cluster.initialized) {
    model_.InitParams(options_.seed, params.data());
    RETURN_IF_ERROR(client_.Init(params));
  }
  spdlog::info(
      "rank {}/{} {} mode={} staleness={} shards={} params={} global_batch={} "
      "steps/epoch={} resume_step={}",
      options_.rank, cluster.num_workers, model_.name(), ConsistencyModeName(cluster.mode),
      cluster.staleness, cluster.num_shards, n, plan.global_batch(), plan.steps_per_epoch(),
      cluster.resume_clock);
  HeartbeatThread heartbeat(client_, cluster.lease);
  if (metrics_ != nullptr) {
    JsonObject line;
    line.Add("kind", "start")
        .Add("rank", options_.rank)
        .Add("resume_step", cluster.resume_clock)
        .Add("total_steps", total_steps);
    RETURN_IF_ERROR(metrics_->Write(line));
  }

  // For evaluation only; the step's own buffers live in StepGradient.
  ASSIGN_OR_RETURN(DeviceBuffer params_dev, device_.Allocate(n * sizeof(float)));

  const absl::Time start = absl::Now();
  absl::Time epoch_start = start;
  double epoch_loss = 0.0;
  int64_t epoch_samples = 0;
  int64_t reported_epochs = 0;
  // Accounts for a step whose push has been acknowledged: counters, its metrics line, and the
  // evaluations and epoch report due after it.
  const auto finish_step = [&](int64_t step, const PullStats& pulled, const PushStats& pushed,
                               const BatchStats& step_stats, absl::Time t0, absl::Time t1,
                               absl::Time t2, absl::Time t2s, absl::Time t3) -> absl::Status {
    const auto us = [](absl::Duration d) { return absl::ToInt64Microseconds(d); };
    live_.steps.fetch_add(1);
    live_.samples.fetch_add(step_stats.count);
    live_.step.store(step);
    live_.pull_us.fetch_add(us(t1 - t0));
    live_.server_wait_us.fetch_add(us(pulled.server_wait));
    live_.compute_us.fetch_add(us(t2 - t1));
    live_.push_us.fetch_add(us(t3 - t2s));
    live_.step_us.fetch_add(us(t3 - t0));
    live_.dropped.fetch_add(pushed.dropped);
    if (pushed.max_staleness > live_.max_staleness.load()) {
      live_.max_staleness.store(pushed.max_staleness);  // only this thread writes it
    }
    stats_.steps += 1;
    stats_.samples += step_stats.count;
    stats_.pull += t1 - t0;
    stats_.compute += t2 - t1;
    stats_.injected += t2s - t2;
    last_push = t3 - t2s;
    stats_.push += t3 - t2s;
    stats_.push_bytes += pushed.payload_bytes;
    stats_.pull_bytes += pulled.payload_bytes;
    stats_.total += t3 - t0;
    const double loss = step_stats.loss_sum / step_stats.count;
    epoch_loss += step_stats.loss_sum;
    epoch_samples += step_stats.count;
    if (metrics_ != nullptr) {
      JsonObject line;
      line.Add("kind", "step")
          .Add("rank", options_.rank)
          .Add("step", step)
          .Add("epoch", step / plan.steps_per_epoch() + 1)
          .Add("loss", loss)
          .Add("accuracy", step_stats.correct / step_stats.count)
          .Add("samples", step_stats.count)
          .Add("step_ms", Ms(t3 - t0))
          .Add("pull_ms", Ms(t1 - t0))
          .Add("compute_ms", Ms(t2 - t1))
          .Add("injected_ms", Ms(t2s - t2))
          .Add("push_ms", Ms(t3 - t2s))
          .Add("server_wait_ms", Ms(pulled.server_wait))
          .Add("staleness", pushed.max_staleness)
          .Add("dropped", pushed.dropped)
          .Add("late", pushed.late)
          .Add("push_bytes", pushed.payload_bytes)
          .Add("pull_bytes", pulled.payload_bytes)
          .Add("wall_s", absl::ToDoubleSeconds(absl::Now() - start));
      RETURN_IF_ERROR(metrics_->Write(line));
    }

    const bool epoch_end = (step + 1) % plan.steps_per_epoch() == 0;
    const bool periodic = options_.evaluate_every > 0 && (step + 1) % options_.evaluate_every == 0;
    if (periodic && !epoch_end && test_ != nullptr && metrics_ != nullptr) {
      carried_step = -1;  // the evaluation reads the freshest weights into `params`
      int64_t updates = 0;
      ASSIGN_OR_RETURN(BatchStats test,
                       EvaluateFresh(step, params, params_dev.as<float>(), &updates));
      JsonObject line;
      line.Add("kind", "eval")
          .Add("rank", options_.rank)
          .Add("step", step + 1)
          .Add("updates", updates)
          .Add("test_loss", test.loss_sum / test.count)
          .Add("test_accuracy", test.correct / test.count)
          .Add("wall_s", absl::ToDoubleSeconds(absl::Now() - start));
      RETURN_IF_ERROR(metrics_->Write(line));
    }
    // After a rejoin the worker may pass an epoch's end again: report each epoch once.
    const int64_t epochs_done = (step + 1) / plan.steps_per_epoch();
    if (epoch_end && epochs_done > reported_epochs && options_.evaluate_each_epoch &&
        test_ != nullptr) {
      reported_epochs = epochs_done;
      carried_step = -1;  // the evaluation reads the freshest weights into `params`
      int64_t updates = 0;
      ASSIGN_OR_RETURN(BatchStats test,
                       EvaluateFresh(step, params, params_dev.as<float>(), &updates));
      const absl::Time now = absl::Now();
      EpochReport report;
      report.epoch = static_cast<int>((step + 1) / plan.steps_per_epoch());
      report.epochs = options_.epochs;
      report.train_loss = epoch_samples > 0 ? epoch_loss / epoch_samples : 0.0;
      report.test_loss = test.loss_sum / test.count;
      report.test_accuracy = test.correct / test.count;
      report.samples_per_sec =
          epoch_samples * cluster.num_workers / absl::ToDoubleSeconds(now - epoch_start);
      report.elapsed = now - start;
      if (metrics_ != nullptr) {
        JsonObject line;
        line.Add("kind", "epoch")
            .Add("rank", options_.rank)
            .Add("epoch", report.epoch)
            .Add("step", step + 1)
            .Add("updates", updates)
            .Add("train_loss", report.train_loss)
            .Add("test_loss", report.test_loss)
            .Add("test_accuracy", report.test_accuracy)
            .Add("samples_per_sec", report.samples_per_sec)
            .Add("wall_s", absl::ToDoubleSeconds(report.elapsed));
        RETURN_IF_ERROR(metrics_->Write(line));
      }
      if (on_epoch_) on_epoch_(report);
    }
    if (epoch_end) {
      epoch_start = absl::Now();
      epoch_loss = 0.0;
      epoch_samples = 0;
    }
    return absl::OkStatus();
  };

  // Waits for the push in flight, if any, and accounts for its step; the time waited is that
  // step's push time. An error (ABORTED: register again) is the push's.
  // Weights it pulled are carried (before finish_step, whose evaluation may drop them).
  const auto settle_push = [&]() -> absl::Status {
    if (!in_flight.has_value()) return absl::OkStatus();
    const absl::Time wait_start = absl::Now();
    absl::StatusOr<PushPullStats> both = in_flight->result.get();
    const InFlightPush done = std::move(*in_flight);
    in_flight.reset();
    RETURN_IF_ERROR(both.status());
    last_push = absl::Now() - wait_start;
    if (done.pull_clock >= 0) {
      carried = std::move(both->pulled);
      carried_step = done.pull_clock;
      carried_weights = done.weights;
    }
    return finish_step(done.step, done.pulled, both->pushed, done.step_stats, done.t0, done.t1,
                       done.t2, done.t2s, done.t2s + last_push);
  };
  // An ABORTED call (lease expired, shard restarted) makes the worker register again: true when
  // it did, and the step loop resumes at the shards' clock. Other errors end the run.
  const auto rejoin_if_aborted = [&](const absl::Status& s) -> absl::StatusOr<bool> {
    if (s.ok()) return false;
    drain_calls();
    if (s.code() != absl::StatusCode::kAborted) return s;
    ASSIGN_OR_RETURN(cluster, Rejoin(s, params));
    return true;
  };
  std::unique_ptr<TaskPool> push_thread;
  if (async_push) push_thread = std::make_unique<TaskPool>(1);

  // The outer loop only runs again when the last step's push, settled after the inner loop, was
  // answered ABORTED: the worker registers again and resumes where the shards are.
  for (;;) {
    for (int64_t step = cluster.resume_clock; step < total_steps; ++step) {
      if (stop.load()) return absl::CancelledError("stopped by signal");
      if (absl::Now() - start >= options_.max_duration) {
        spdlog::info("rank {} reached its time budget at step {}", options_.rank, step);
        break;
      }
      const absl::Time t0 = absl::Now();
      PullStats pulled;
      PushStats pushed;
      BatchStats step_stats;
      absl::Time t1, t2, t2s, t3;  // computing starts, stops, pushing starts, the step ends
      if (options_.priority) {
        StepTimes times;
        const absl::Status s =
            PriorityStep(step, *gradient, params, grads, options_.batch_size * options_.accumulate,
                         &pulled, &pushed, &step_stats, &times);
        if (s.code() == absl::StatusCode::kAborted) {
          ASSIGN_OR_RETURN(cluster, Rejoin(s, params));
          step = cluster.resume_clock - 1;
          continue;
        }
        RETURN_IF_ERROR(s);
        t1 = t0 + times.pull;
        t2 = t2s = t1 + times.compute;
        t3 = t2 + times.push;
      } else {
        // Pipelined: the call in flight may be bringing this step's weights.
        if (pipelined && carried_step != step && in_flight.has_value() &&
            in_flight->pull_clock == step) {
          ASSIGN_OR_RETURN(const bool rejoined, rejoin_if_aborted(settle_push()));
          if (rejoined) {
            step = cluster.resume_clock - 1;  // the loop's ++step resumes at the shards' clock
            continue;
          }
        }
        absl::StatusOr<PullStats> pull;
        if (prefetch.valid() && prefetch_step == step) {
          pull = prefetch.get();  // only what is left of it is waited for
          std::swap(params, prefetch_params);
        } else if (carried_step == step) {
          pull = std::move(carried);  // arrived with an earlier push
          carried_step = -1;
          if (carried_weights.data() != params.data()) std::swap(params, prefetch_params);
        } else {
          drain_prefetch();  // a prefetch of another step (after a rejoin); not the push
          pull = client_.Pull(step, /*no_wait=*/false, params);
        }
        // Pipelined, the call in flight brings the next step's weights; a prefetch starts the
        // pipeline (first step, or after an evaluation or rejoin dropped carried weights).
        const bool next_coming =
            pipelined && (carried_step == step + 1 ||
                          (in_flight.has_value() && in_flight->pull_clock == step + 1));
        if (overlap && !next_coming && pull.ok() && step + 1 < total_steps) {
          prefetch_step = step + 1;
          prefetch = std::async(std::launch::async, [this, next = step + 1, out = prefetch_params] {
            return client_.Pull(next, /*no_wait=*/false, out);
          });
        }
        {
          ASSIGN_OR_RETURN(const bool rejoined, rejoin_if_aborted(pull.status()));
          if (rejoined) {
            step = cluster.resume_clock - 1;
            continue;
          }
        }
        pulled = *std::move(pull);
        t1 = absl::Now();
        ASSIGN_OR_RETURN(step_stats, gradient->Compute(step, params, grads));
        t2 = absl::Now();
        // The injected delay stands for slower computation: it comes before the push, so the
        // gradient arrives late and staler, as a slow worker's would.
        const absl::Duration delay = delays.DelayFor(step, (t2 - t0) + last_push);
        if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
        t2s = absl::Now();
        const int count = static_cast<int>(step_stats.count);
        if (async_push) {
          {
            ASSIGN_OR_RETURN(const bool rejoined, rejoin_if_aborted(settle_push()));
            if (rejoined) {
              step = cluster.resume_clock - 1;  // this step's gradient is dropped with the rest
              continue;
            }
          }
          // Pipelined: pull the step after next into the buffer this step computed from (free
          // now) when the next step's weights are here or being prefetched (into the other
          // buffer), else the next step's into the other buffer; nothing past the last step.
          int64_t pull_clock = -1;
          absl::Span<float> into;
          if (pipelined) {
            const bool next_here =
                carried_step == step + 1 || (prefetch.valid() && prefetch_step == step + 1);
            pull_clock = next_here ? step + 2 : step + 1;
            into = next_here ? params : prefetch_params;
            if (pull_clock >= total_steps) pull_clock = -1;
          }
          in_flight = InFlightPush{
              step,
              pulled,
              step_stats,
              t0,
              t1,
              t2,
              t2s,
              pull_clock,
              into,
              push_thread->Submit([this, step, count, pull_clock, into, g = grads,
                                   versions = pulled.versions]() -> absl::StatusOr<PushPullStats> {
                if (pull_clock >= 0) {
                  return client_.PushPull(step, versions, count, g, pull_clock, into);
                }
                PushPullStats only_pushed;
                ASSIGN_OR_RETURN(only_pushed.pushed, client_.Push(step, versions, count, g));
                return only_pushed;
              })};
          std::swap(grads, spare_grads);  // the next step computes while this one is pushed
          continue;                       // accounted for when its push is settled
        }
        absl::StatusOr<PushStats> push;
        if (push_pull && step + 1 < total_steps) {
          absl::StatusOr<PushPullStats> both =
              client_.PushPull(step, pulled.versions, count, grads, step + 1, params);
          if (both.ok()) {
            push = both->pushed;
            carried = std::move(both->pulled);
            carried_step = step + 1;
            carried_weights = params;
          } else {
            push = both.status();
          }
        } else {
          push = client_.Push(step, pulled.versions, count, grads);
        }
        {
          ASSIGN_OR_RETURN(const bool rejoined, rejoin_if_aborted(push.status()));
          if (rejoined) {
            step = cluster.resume_clock - 1;
            continue;
          }
        }
        pushed = *push;
        t3 = absl::Now();
      }

      RETURN_IF_ERROR(finish_step(step, pulled, pushed, step_stats, t0, t1, t2, t2s, t3));
    }
    ASSIGN_OR_RETURN(const bool rejoined, rejoin_if_aborted(settle_push()));
    if (rejoined) continue;
    break;
  }
  drain_calls();  // a prefetch is never started past the last step; this is for `break`
  spdlog::info("rank {} finished {} steps in {:.1f}s", options_.rank, total_steps,
               absl::ToDoubleSeconds(absl::Now() - start));
  return absl::OkStatus();
}

namespace {

// The stats of pushes that together delivered one step.
void AddPushStats(const PushStats& add, PushStats* total) {
  total->applied += add.applied;
  total->buffered += add.buffered;
  total->duplicates += add.duplicates;
  total->dropped += add.dropped;
  total->late += add.late;
  total->max_staleness = std::max(total->max_staleness, add.max_staleness);
  total->payload_bytes += add.payload_bytes;
}

}  // namespace

absl::Status Trainer::PriorityStep(int64_t step, StepGradient& gradient, absl::Span<float> params,
                                   absl::Span<float> grads, int num_samples, PullStats* pulled,
                                   PushStats* pushed, BatchStats* batch, StepTimes* times) {
  const std::vector<KeyRange> parts =
      MergeParts(model_.LayerParamRanges(), options_.priority_min_part);
  // Shared by the three threads of the step.
  std::mutex mu;
  std::condition_variable changed;
  std::vector<bool> arrived(parts.size(), false);
  bool pull_done = false;
  absl::StatusOr<PullStats> pull_result;
  std::vector<KeyRange> to_push;  // gradients backward has produced, not yet handed to a push
  bool compute_done = false;

  // All layers' pulls go out at once, first layer first; each arrival wakes the forward pass.
  if (step_threads_ == nullptr) step_threads_ = std::make_unique<TaskPool>(3);
  std::future<void> puller = step_threads_->Submit([&] {
    absl::StatusOr<PullStats> r = client_.PullParts(step, parts, params, [&](size_t i) {
      const std::lock_guard<std::mutex> lock(mu);
      arrived[i] = true;
      changed.notify_all();
    });
    const std::lock_guard<std::mutex> lock(mu);
    pull_result = std::move(r);
    pull_done = true;
    changed.notify_all();
  });
  // Each pusher sends whatever backward has produced since a push last went out (one call for
  // those layers, their pieces in flight together), with the pull's versions as base versions.
  // Two of them, so that a layer produced while a push is in flight leaves at once instead of
  // after that push's round trip.
  const auto push_loop = [&]() -> absl::StatusOr<PushStats> {
    std::vector<int64_t> base_versions;
    {
      std::unique_lock<std::mutex> lock(mu);
      changed.wait(lock, [&] { return pull_done; });
      if (!pull_result.ok()) return pull_result.status();
      base_versions = pull_result->versions;
    }
    PushStats total;
    for (;;) {
      std::vector<KeyRange> ready;
      {
        std::unique_lock<std::mutex> lock(mu);
        changed.wait(lock, [&] { return !to_push.empty() || compute_done; });
        ready.swap(to_push);
      }
      if (ready.empty()) return total;  // backward is done and everything went out
      ASSIGN_OR_RETURN(const PushStats s,
                       client_.PushParts(step, base_versions, num_samples, grads, ready));
      AddPushStats(s, &total);
    }
  };
  std::future<absl::StatusOr<PushStats>> pushers[] = {step_threads_->Submit(push_loop),
                                                      step_threads_->Submit(push_loop)};

  absl::Duration waited;
  StepGradient::LayerCallbacks callbacks;
  // The part that holds a layer.
  const auto part_of = [&](KeyRange layer) {
    size_t i = 0;
    while (i + 1 < parts.size() && parts[i].end <= layer.begin) ++i;
    return i;
  };
  callbacks.weights_ready = [&](KeyRange layer) -> absl::Status {
    const size_t i = part_of(layer);
    const absl::Time t = absl::Now();
    std::unique_lock<std::mutex> lock(mu);
    changed.wait(lock, [&] { return arrived[i] || pull_done; });
    waited += absl::Now() - t;
    if (arrived[i]) return absl::OkStatus();
    return pull_result.ok() ? absl::InternalError("a pulled layer never arrived")
                            : pull_result.status();
  };
  // Backward runs last layer first, so a part is complete once its first layer is.
  callbacks.gradient_ready = [&](KeyRange layer) {
    const KeyRange part = parts[part_of(layer)];
    if (layer.begin != part.begin) return absl::OkStatus();
    const std::lock_guard<std::mutex> lock(mu);
    to_push.push_back(part);
    changed.notify_all();
    return absl::OkStatus();
  };
  const absl::Time start = absl::Now();
  absl::StatusOr<BatchStats> computed = gradient.ComputeByLayer(step, params, grads, callbacks);
  const absl::Time computed_at = absl::Now();
  {
    const std::lock_guard<std::mutex> lock(mu);
    compute_done = true;
    changed.notify_all();
  }
  puller.wait();
  absl::StatusOr<PushStats> push_result = pushers[0].get();
  absl::StatusOr<PushStats> second = pushers[1].get();
  if (push_result.ok() && second.ok()) {
    AddPushStats(*second, &*push_result);
  } else if (push_result.ok()) {
    push_result = second.status();
  }
  times->pull = waited;
  times->compute = computed_at - start - waited;
  times->push = absl::Now() - computed_at;
  // The pull's error explains the others (they stopped because of it).
  RETURN_IF_ERROR(pull_result.status());
  RETURN_IF_ERROR(computed.status());
  RETURN_IF_ERROR(push_result.status());
  *pulled = *std::move(pull_result);
  *pushed = *push_result;
  *batch = *computed;
  return absl::OkStatus();
}

absl::StatusOr<ClusterInfo> Trainer::Rejoin(const absl::Status& why,
                                            absl::Span<const float> params) {
  if (++rejoins_ > options_.max_rejoins) {
    return absl::AbortedError(absl::StrCat("gave up after ", options_.max_rejoins,
                                           " re-registrations; last: ", why.message()));
  }
  spdlog::warn("rank {} registers again: {}", options_.rank, std::string(why.message()));
  ASSIGN_OR_RETURN(ClusterInfo cluster, client_.Register(options_.rank, options_.register_timeout));
  if (!cluster.initialized) {
    // A shard that restarted without a checkpoint has no values: offer the freshest we hold.
    spdlog::warn("rank {}: a shard lost its parameters; offering this worker's copy",
                 options_.rank);
    RETURN_IF_ERROR(client_.Init(params));
  }
  stats_.rejoins = rejoins_;
  live_.rejoins.store(rejoins_);
  spdlog::info("rank {} resumes at step {}", options_.rank, cluster.resume_clock);
  if (metrics_ != nullptr) {
    JsonObject line;
    line.Add("kind", "rejoin")
        .Add("rank", options_.rank)
        .Add("resume_step", cluster.resume_clock)
        .Add("reason", std::string(why.message()));
    RETURN_IF_ERROR(metrics_->Write(line));
  }
  return cluster;
}

absl::StatusOr<BatchStats> Trainer::EvaluateFresh(int64_t step, absl::Span<float> params,
                                                  float* params_dev, int64_t* updates) {
  // An observer read: the freshest weights, whatever the consistency mode.
  ASSIGN_OR_RETURN(PullStats read, client_.Pull(step + 1, /*no_wait=*/true, params));
  *updates = 0;
  for (int64_t v : read.versions) *updates = std::max(*updates, v);
  RETURN_IF_ERROR(device_.CopyToDevice(params.data(), params.size() * sizeof(float), params_dev));
  return EvaluateDataset(model_, device_, params_dev, *test_);
}

}  // namespace ps
