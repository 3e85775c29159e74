// ps_bench_transport: how fast gradients go out and weights come back, against two references
// measured in the same run by this binary:
// - the plain gRPC unary call carrying `bytes`, as a straightforward service is written: a sync
//   server of the same ps.v1 messages whose handlers copy the payload in and out of protobuf
//   `bytes` fields, and a client that does the same (ratio_vs_grpc);
// - memcpy of the same number of bytes, warm buffers, one thread (ratio_vs_memcpy).
// "push" and "pull" are the cluster's real path: ps_server's shard and service (ASP, plain SGD, so
// a push includes the shard applying the update) and ps_worker's client, over loopback TCP, with
// the payloads in the messages ("transport":"grpc"), through shared memory ("shm"), and through
// shared memory with the caller's buffers being the region's ("shm_direct", zero copy).
// W workers (threads, each its own client and channels) and S shards; a worker moves the whole
// model per call, split over the shards; gbps counts the bytes of all workers. One JSON line per
// measurement:
//   {"bench":"transport","op":"push","transport":"shm","mib":16,"workers":1,"shards":1,"gbps":...,
//    "grpc_gbps":...,"memcpy_gbps":...,"ratio_vs_grpc":...,"ratio_vs_memcpy":...}
//
//   ps_bench_transport [--mib 1,16,64] [--configs 1x1,2x2] [--seconds 1.5] [--rounds 3]
//                      [--transports grpc,shm,shm_direct] [--chunk_mib 0] [--connections 1]

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/base/json_lines.h"
#include "common/base/malloc_tuning.h"
#include "common/base/param_layout.h"
#include "common/cli/cli.h"
#include "common/transport/grpc_security.h"
#include "grpcpp/grpcpp.h"
#include "proto/parameter_server.grpc.pb.h"
#include "server/shard_server.h"
#include "spdlog/spdlog.h"
#include "worker/grpc_parameter_client.h"

ABSL_FLAG(std::vector<std::string>, mib, std::vector<std::string>({"1", "16", "64"}),
          "Model sizes in MiB of float32 (what one worker pushes or pulls per call).");
ABSL_FLAG(std::vector<std::string>, configs, std::vector<std::string>({"1x1", "2x2"}),
          "WORKERSxSHARDS configurations.");
ABSL_FLAG(double, seconds, 1.5, "Time per measurement.");
ABSL_FLAG(std::vector<std::string>, ops, std::vector<std::string>({"push", "pull"}),
          "Which operations to measure (for profiling one of them).");
ABSL_FLAG(double, chunk_mib, 0,
          "Our client: each shard's range travels in calls of at most this many MiB, all in "
          "flight together (0: one call per shard).");
ABSL_FLAG(int32_t, connections, 1, "Our client: TCP connections per shard for the chunks.");
ABSL_FLAG(std::vector<std::string>, transports,
          std::vector<std::string>({"grpc", "shm", "shm_direct"}),
          "Our client's payload paths: grpc (in the messages), shm (through shared memory, the "
          "calls still gRPC: what workers next to their shards use) and shm_direct (shm with the "
          "caller's weights and gradient kept in the transport's buffers, as ps_worker's CPU "
          "trainer does without --overlap/--async_push: no copy on the worker).");
ABSL_FLAG(int32_t, rounds, 3, "Measurements of each kind; the best is reported (noisy machine).");

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kMaxMessage = 256 << 20;

// Runs `op` on `threads` threads for about `seconds` (at least 2 calls each); returns calls per
// second over all threads.
template <typename Op>
double CallsPerSecond(int threads, double seconds, Op op) {
  std::atomic<int64_t> calls{0};
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      int64_t mine = 0;
      while (mine < 2 || std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
        op(t);
        ++mine;
      }
      calls += mine;
    });
  }
  for (auto& th : pool) th.join();
  return calls / std::chrono::duration<double>(Clock::now() - start).count();
}

// The reference: the ps.v1 service written the plain way (sync API, protobuf `bytes` copies).
class PlainService final : public ps::v1::ParameterServer::Service {
 public:
  explicit PlainService(size_t max_bytes) : store_(max_bytes, '\1') {}
  grpc::Status Push(grpc::ServerContext*, const ps::v1::PushRequest* req,
                    ps::v1::PushResponse* resp) override {
    resp->set_applied(!req->gradient().empty());
    return grpc::Status::OK;
  }
  grpc::Status Pull(grpc::ServerContext*, const ps::v1::PullRequest* req,
                    ps::v1::PullResponse* resp) override {
    const size_t bytes = static_cast<size_t>(req->end() - req->begin()) * sizeof(float);
    resp->set_values(store_.data(), std::min(bytes, store_.size()));
    return grpc::Status::OK;
  }

 private:
  std::string store_;
};

struct PlainServer {
  std::unique_ptr<PlainService> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

PlainServer StartPlain(size_t bytes) {
  PlainServer p;
  p.service = std::make_unique<PlainService>(bytes);
  grpc::ServerBuilder b;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &p.port);
  b.SetMaxReceiveMessageSize(kMaxMessage);
  b.SetMaxSendMessageSize(kMaxMessage);
  b.RegisterService(p.service.get());
  p.server = b.BuildAndStart();
  return p;
}

// One plain worker: a typed stub per shard; a call sends each shard its range at once.
class PlainWorker {
 public:
  PlainWorker(const std::vector<int>& ports, int64_t total) : total_(total) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMaxMessage);
    args.SetMaxSendMessageSize(kMaxMessage);
    args.SetInt("ps.bench.plain", 1);  // a channel of its own, not shared with other workers
    for (int port : ports) {
      stubs_.push_back(ps::v1::ParameterServer::NewStub(grpc::CreateCustomChannel(
          "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials(), args)));
    }
  }
  void Push(const std::vector<float>& grad) {
    const int n = static_cast<int>(stubs_.size());
    std::vector<ps::v1::PushRequest> req(n);
    std::vector<ps::v1::PushResponse> resp(n);
    for (int s = 0; s < n; ++s) {
      const ps::KeyRange r = ps::ShardRange(total_, n, s);
      req[s].set_gradient(grad.data() + r.begin, r.size() * sizeof(float));
    }
    CallAll(req, &resp, &ps::v1::ParameterServer::Stub::PrepareAsyncPush);
  }
  void Pull(std::vector<float>* params) {
    const int n = static_cast<int>(stubs_.size());
    std::vector<ps::v1::PullRequest> req(n);
    std::vector<ps::v1::PullResponse> resp(n);
    for (int s = 0; s < n; ++s) {
      const ps::KeyRange r = ps::ShardRange(total_, n, s);
      req[s].set_begin(r.begin);
      req[s].set_end(r.end);
    }
    CallAll(req, &resp, &ps::v1::ParameterServer::Stub::PrepareAsyncPull);
    for (int s = 0; s < n; ++s) {
      const ps::KeyRange r = ps::ShardRange(total_, n, s);
      std::memcpy(params->data() + r.begin, resp[s].values().data(), resp[s].values().size());
    }
  }

 private:
  template <typename Req, typename Resp, typename Start>
  void CallAll(const std::vector<Req>& req, std::vector<Resp>* resp, Start start) {
    grpc::CompletionQueue cq;
    const size_t n = stubs_.size();
    std::vector<grpc::ClientContext> ctx(n);
    std::vector<grpc::Status> st(n);
    std::vector<std::unique_ptr<grpc::ClientAsyncResponseReader<Resp>>> readers(n);
    for (size_t s = 0; s < n; ++s) {
      readers[s] = (stubs_[s].get()->*start)(&ctx[s], req[s], &cq);
      readers[s]->StartCall();
      readers[s]->Finish(&(*resp)[s], &st[s], reinterpret_cast<void*>(s));
    }
    for (size_t i = 0; i < n; ++i) {
      void* tag;
      bool ok;
      cq.Next(&tag, &ok);
    }
    for (const auto& s : st) {
      if (!s.ok()) spdlog::critical("plain call failed: {}", s.error_message());
    }
  }
  int64_t total_;
  std::vector<std::unique_ptr<ps::v1::ParameterServer::Stub>> stubs_;
};

struct Cluster {
  std::vector<std::unique_ptr<ps::ShardServer>> shards;
  std::vector<std::unique_ptr<ps::GrpcParameterClient>> workers;
};

Cluster StartCluster(int workers, int shards, int64_t total, bool shared_memory) {
  Cluster c;
  const uint64_t fingerprint = 0xbe4c4;
  std::vector<std::string> servers;
  for (int s = 0; s < shards; ++s) {
    ps::ShardServerOptions o;
    o.shard.shard_id = s;
    o.shard.num_shards = shards;
    o.shard.consistency.mode = ps::ConsistencyMode::kAsp;
    o.shard.consistency.num_workers = workers;
    o.shard.optimizer.lr = 1e-9f;
    o.shard.lease = absl::Minutes(10);
    o.max_message_bytes = kMaxMessage;
    auto server = ps::ShardServer::Start(o);
    if (!server.ok()) {
      spdlog::critical("shard: {}", server.status().ToString());
      std::exit(1);
    }
    servers.push_back("127.0.0.1:" + std::to_string((*server)->port()));
    c.shards.push_back(std::move(*server));
  }
  std::vector<float> init(total, 0.5f);
  for (int w = 0; w < workers; ++w) {
    ps::GrpcClientOptions o;
    o.servers = servers;
    o.fingerprint = fingerprint;
    o.total_params = total;
    o.max_message_bytes = kMaxMessage;
    o.chunk_bytes = static_cast<int64_t>(absl::GetFlag(FLAGS_chunk_mib) * (1 << 20));
    o.connections = absl::GetFlag(FLAGS_connections);
    o.shared_memory = shared_memory;
    auto client = ps::GrpcParameterClient::Create(o);
    absl::Status s = client.status();
    if (s.ok()) s = (*client)->Register(w, absl::Seconds(30)).status();
    if (s.ok() && w == 0) s = (*client)->Init(init);
    if (s.ok() && (*client)->shared_memory_shards() != (shared_memory ? shards : 0)) {
      s = absl::InternalError("shared memory was not attached as asked");
    }
    if (!s.ok()) {
      spdlog::critical("worker {}: {}", w, s.ToString());
      std::exit(1);
    }
    c.workers.push_back(std::move(*client));
  }
  return c;
}

double MemcpyGbps(size_t bytes, double seconds) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  const double calls = CallsPerSecond(1, seconds, [&](int) {
    std::memcpy(b.data(), a.data(), bytes);
    asm volatile("" : : "r"(b.data()) : "memory");
  });
  return calls * bytes / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  ps::TuneMallocForLargeMessages();  // as ps_server and ps_worker do; the references get it too
  ps::ParseCommandLine(argc, argv,
                       "Push and pull throughput against plain gRPC and memcpy.\n"
                       "  ps_bench_transport [--mib 1,16,64] [--configs 1x1,2x2] [--seconds 1.5]\n"
                       "                     [--transports grpc,shm,shm_direct]");
  spdlog::set_level(spdlog::level::warn);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  for (const std::string& config : absl::GetFlag(FLAGS_configs)) {
    std::vector<std::string> parts = absl::StrSplit(config, 'x');
    int workers = 0, shards = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &workers) ||
        !absl::SimpleAtoi(parts[1], &shards) || workers < 1 || shards < 1) {
      std::fprintf(stderr, "--configs: '%s' is not WORKERSxSHARDS\n", config.c_str());
      return 2;
    }
    for (const std::string& mib_text : absl::GetFlag(FLAGS_mib)) {
      int mib = 0;
      if (!absl::SimpleAtoi(mib_text, &mib) || mib < 1 || mib > 128) {
        std::fprintf(stderr, "--mib: '%s' is not in [1, 128]\n", mib_text.c_str());
        return 2;
      }
      const size_t bytes = static_cast<size_t>(mib) << 20;
      const int64_t total = static_cast<int64_t>(bytes / sizeof(float));
      const std::vector<std::string> transports = absl::GetFlag(FLAGS_transports);
      std::vector<Cluster> clusters;
      for (const std::string& t : transports) {
        if (t != "grpc" && t != "shm" && t != "shm_direct") {
          std::fprintf(stderr, "--transports: '%s' is not grpc, shm or shm_direct\n", t.c_str());
          return 2;
        }
        clusters.push_back(StartCluster(workers, shards, total, t != "grpc"));
      }
      std::vector<PlainServer> plain_servers;
      std::vector<int> plain_ports;
      for (int s = 0; s < shards; ++s) {
        plain_servers.push_back(StartPlain(bytes));
        plain_ports.push_back(plain_servers.back().port);
      }
      std::vector<std::unique_ptr<PlainWorker>> plain;
      std::vector<std::vector<float>> grads(workers, std::vector<float>(total, 1e-3f));
      std::vector<std::vector<float>> params(workers, std::vector<float>(total, 0.0f));
      for (int w = 0; w < workers; ++w) {
        plain.push_back(std::make_unique<PlainWorker>(plain_ports, total));
      }
      // Each cluster's workers keep their own clocks and versions.
      std::vector<std::vector<int64_t>> clocks(clusters.size(), std::vector<int64_t>(workers, 0));
      std::vector<std::vector<std::vector<int64_t>>> versions(
          clusters.size(),
          std::vector<std::vector<int64_t>>(workers, std::vector<int64_t>(shards)));
      // shm_direct: each worker's buffers are its client's transport buffers.
      std::vector<std::vector<ps::TransportBuffers>> own(clusters.size());
      for (size_t c = 0; c < clusters.size(); ++c) {
        for (int w = 0; w < workers; ++w) {
          ps::TransportBuffers b;
          if (transports[c] == "shm_direct") {
            b = clusters[c].workers[w]->TakeTransportBuffers(0);
            std::fill(b.gradient.begin(), b.gradient.end(), 1e-3f);
          } else {
            b.weights = absl::MakeSpan(params[w]);
            b.gradient = absl::MakeSpan(grads[w]);
          }
          own[c].push_back(b);
        }
      }
      auto ours_push = [&](size_t c, int w) {
        auto r = clusters[c].workers[w]->Push(clocks[c][w], versions[c][w], 32, own[c][w].gradient);
        if (!r.ok()) {
          spdlog::critical("push: {}", r.status().ToString());
          std::exit(1);
        }
        ++clocks[c][w];
      };
      auto ours_pull = [&](size_t c, int w) {
        auto r = clusters[c].workers[w]->Pull(clocks[c][w], false, own[c][w].weights);
        if (!r.ok()) {
          spdlog::critical("pull: {}", r.status().ToString());
          std::exit(1);
        }
        versions[c][w] = r->versions;
      };
      // [op][transport]: ours; [op] plain gRPC.
      std::vector<std::vector<double>> best(2, std::vector<double>(clusters.size(), 0.0));
      double best_plain[2] = {0, 0};
      double memcpy_gbps = 0;
      const std::vector<std::string> ops = absl::GetFlag(FLAGS_ops);
      const bool do_op[2] = {std::find(ops.begin(), ops.end(), "push") != ops.end(),
                             std::find(ops.begin(), ops.end(), "pull") != ops.end()};
      for (int round = 0; round < rounds; ++round) {
        const double per_call = static_cast<double>(bytes) / 1e9;
        for (int op = 0; op < 2; ++op) {
          if (!do_op[op]) continue;
          for (size_t c = 0; c < clusters.size(); ++c) {
            best[op][c] =
                std::max(best[op][c], per_call * CallsPerSecond(workers, seconds, [&](int w) {
                                        op == 0 ? ours_push(c, w) : ours_pull(c, w);
                                      }));
          }
          best_plain[op] =
              std::max(best_plain[op], per_call * CallsPerSecond(workers, seconds, [&](int w) {
                                         if (op == 0) {
                                           plain[w]->Push(grads[w]);
                                         } else {
                                           plain[w]->Pull(&params[w]);
                                         }
                                       }));
        }
        memcpy_gbps = std::max(memcpy_gbps, MemcpyGbps(bytes, seconds / 2));
      }
      for (int op = 0; op < 2; ++op) {
        if (!do_op[op]) continue;
        for (size_t c = 0; c < clusters.size(); ++c) {
          const double ours = best[op][c];
          const double grpc = best_plain[op];
          std::printf("%s\n", ps::JsonObject()
                                  .Add("bench", "transport")
                                  .Add("op", op == 0 ? "push" : "pull")
                                  .Add("transport", transports[c])
                                  .Add("mib", mib)
                                  .Add("workers", workers)
                                  .Add("shards", shards)
                                  .Add("chunk_mib", absl::GetFlag(FLAGS_chunk_mib))
                                  .Add("connections", absl::GetFlag(FLAGS_connections))
                                  .Add("gbps", ours)
                                  .Add("grpc_gbps", grpc)
                                  .Add("memcpy_gbps", memcpy_gbps)
                                  .Add("ratio_vs_grpc", ours / grpc)
                                  .Add("ratio_vs_memcpy", ours / memcpy_gbps)
                                  .str()
                                  .c_str());
          std::fflush(stdout);
        }
      }
      for (auto& p : plain_servers) p.server->Shutdown();
    }
  }
  return 0;
}
