// ps_bench_transport: how fast gradients go out and weights come back, against three references
// measured in the same run by this binary:
// - a TCP stream, as iperf3 measures one: per worker, one connection moving the same bytes in
//   1 MiB writes to a reader that discards them (ratio_vs_tcp; W workers: W streams at once);
// - the plain gRPC unary call carrying `bytes`, as a straightforward service is written: a sync
//   server of the same ps.v1 messages whose handlers copy the payload in and out of protobuf
//   `bytes` fields, and a client that does the same (ratio_vs_grpc);
// - memcpy of the same number of bytes, warm buffers, one thread (ratio_vs_memcpy).
// "push" and "pull" are the cluster's real path: ps_server's shard and service (ASP or --mode bsp,
// plain SGD, so a push includes the shard applying the update) and ps_worker's client, over TCP,
// with the payloads in the messages ("transport":"grpc"), through shared memory ("shm"), and
// through shared memory with the caller's buffers being the region's ("shm_direct", zero copy). W
// workers (threads, each its own client and channels) and S shards; a worker moves the whole model
// per call, split over the shards; gbps counts the bytes of all workers. One JSON line per
// measurement:
//   {"bench":"transport","op":"push","transport":"grpc","mib":16,"workers":1,"shards":1,
//    "gbps":...,"tcp_gbps":...,"grpc_gbps":...,"memcpy_gbps":...,"ratio_vs_tcp":...,...}
// "faults_per_call" (and "grpc_faults_per_call" for the plain call) is the process's minor page
// faults per call, both ends counted, the fewest over the rounds: a call that touches fresh memory
// pays for every 4 KiB page, about 17 us each on this project's VMs.
// Small messages (--small): per config and transport, the round trip of one 64 KiB push and of
// one 64 KiB pull (median microseconds, "op":"push_64k"/"pull_64k") and a burst of 1 000 calls,
// pushes and pulls of 1 KiB in turn, back to back per worker ("op":"burst_1000", milliseconds),
// each beside the plain gRPC call's.
// Across hosts: with --server_netns NAME every server (shards, the plain gRPC server, the TCP
// reader) is started in network namespace NAME (as `ip netns add` makes it; needs root) and the
// workers, in this process's namespace, dial --host; `bench/link_bench.sh --transport` joins two
// namespaces with a veth pair and runs it there (payloads in the messages only).
// --ops push_pull measures a training step's call instead (push, then the next clock's weights
// back; both directions counted), against a plain push then pull.
//
//   ps_bench_transport [--mib 1,16,64] [--configs 1x1,2x2] [--seconds 1.5] [--rounds 3]
//                      [--transports grpc,shm,shm_direct] [--chunk_mib 0] [--connections 1]
//                      [--ops push,pull,push_pull] [--mode asp|bsp] [--small]
//                      [--server_netns NAME --host ADDR]

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/base/json_lines.h"
#include "common/base/param_layout.h"
#include "common/base/process_tuning.h"
#include "common/cli/cli.h"
#include "common/transport/grpc_security.h"
#include "grpcpp/grpcpp.h"
#include "proto/parameter_server.grpc.pb.h"
#include "server/shard_server.h"
#include "spdlog/spdlog.h"
#include "worker/grpc_parameter_client.h"
#include "worker/transfer_flags.h"
#include "worker/worker_flags.h"

ABSL_FLAG(std::vector<std::string>, mib, std::vector<std::string>({"1", "16", "64"}),
          "Model sizes in MiB of float32 (what one worker pushes or pulls per call).");
ABSL_FLAG(std::vector<std::string>, configs, std::vector<std::string>({"1x1", "2x2"}),
          "WORKERSxSHARDS configurations.");
ABSL_FLAG(double, seconds, 1.5, "Time per measurement.");
ABSL_FLAG(std::vector<std::string>, ops, std::vector<std::string>({"push", "pull"}),
          "Which operations to measure: push, pull, push_pull (a training step's call: push, then "
          "the next clock's weights back; gbps counts both ways; compared with the plain push and "
          "pull only).");
ABSL_FLAG(std::vector<std::string>, transports,
          std::vector<std::string>({"grpc", "shm", "shm_direct"}),
          "Our client's payload paths: grpc (in the messages), shm (through shared memory, the "
          "calls over the shard's local socket unless --local_calls=false: what workers next to "
          "their shards use) and shm_direct (shm with the "
          "caller's weights and gradient kept in the transport's buffers, as ps_worker's CPU "
          "trainer does without --overlap/--async_push: no copy on the worker).");
ABSL_FLAG(bool, local_calls, true,
          "shm and shm_direct: calls over the shard's local socket (false: over gRPC).");
ABSL_FLAG(int32_t, rounds, 3, "Measurements of each kind; the best is reported (noisy machine).");
ABSL_FLAG(bool, small, false,
          "Also measure small messages: the 64 KiB push and pull round trips and a burst of 1 000 "
          "calls of 1 KiB, per config and transport.");
ABSL_FLAG(bool, bulk, true, "Measure the --mib payloads (false: only --small's).");
ABSL_FLAG(std::string, mode, "asp",
          "The shards' consistency mode: asp (workers never wait), or bsp with one worker (its "
          "rounds of one push apply at once; transfers with a lone shard are split only under "
          "BSP, see --split_lone_pulls and --split_lone_pushes).");
ABSL_FLAG(bool, references, true,
          "Measure the references (TCP stream, plain gRPC, memcpy); false measures only the "
          "project's path, for a profiler (the ratios are then left out).");
ABSL_FLAG(std::string, server_netns, "",
          "Start every server in this network namespace (/var/run/netns/NAME; needs root); the "
          "workers stay in this process's and dial --host.");
ABSL_FLAG(std::string, host, "127.0.0.1", "The address the workers dial.");

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kMaxMessage = 256 << 20;
constexpr size_t kTcpWriteBytes = size_t{1} << 20;  // iperf3's default for TCP (-l)

[[noreturn]] void Die(const std::string& what) {
  spdlog::critical("{}", what);
  std::exit(1);
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The process's minor page faults so far (every thread's: a call's two ends when both live here).
int64_t MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// What CallsPerSecond measured: the rate, and the page faults each call cost. On this project's
// VMs a fault costs about 17 us (nested virtualisation), so a path that touches fresh pages on
// every call shows here before it shows in the rate.
struct CallRate {
  double per_second = 0;
  double faults_per_call = 0;
};

// Runs `op` on `threads` threads for about `seconds` (at least 2 calls each); returns calls per
// second over all threads and the process's minor faults per call.
template <typename Op>
CallRate CallsPerSecond(int threads, double seconds, Op op) {
  std::atomic<int64_t> calls{0};
  const int64_t faults_before = MinorFaults();
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      int64_t mine = 0;
      while (mine < 2 || SecondsSince(start) < seconds) {
        op(t);
        ++mine;
      }
      calls += mine;
    });
  }
  for (auto& th : pool) th.join();
  const double elapsed = SecondsSince(start);
  return {calls / elapsed, static_cast<double>(MinorFaults() - faults_before) / calls};
}

// Where the servers run and how the workers reach them.
struct Sites {
  std::string netns;      // empty: this process's namespace
  std::string bind_host;  // what the servers bind
  std::string dial_host;  // what the workers dial
};

// Runs `start` where the servers live: on this thread, or on a thread that entered the servers'
// network namespace. Sockets keep the namespace they were made in, so listeners bound there
// (and the connections they accept) stay there after the thread ends.
void AtServers(const Sites& sites, const std::function<void()>& start) {
  if (sites.netns.empty()) return start();
  std::thread t([&] {
    const std::string path = "/var/run/netns/" + sites.netns;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
      Die(path + ": cannot enter the namespace: " + std::strerror(errno));
    }
    close(fd);
    start();
  });
  t.join();
}

// The TCP reference's far end: accepts connections and reads them to their end into a 1 MiB
// buffer, discarding the bytes, then closes them (which tells the writer that all arrived).
class TcpSink {
 public:
  explicit TcpSink(const std::string& bind_host) {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    socklen_t len = sizeof(addr);
    if (listener_ < 0 || inet_pton(AF_INET, bind_host.c_str(), &addr.sin_addr) != 1 ||
        bind(listener_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(listener_, 64) != 0 ||
        getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      Die("TCP reference: cannot listen on " + bind_host + ": " + std::strerror(errno));
    }
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  TcpSink(const TcpSink&) = delete;
  TcpSink& operator=(const TcpSink&) = delete;
  ~TcpSink() {
    shutdown(listener_, SHUT_RDWR);  // wakes accept()
    acceptor_.join();
    for (auto& r : readers_) r.join();
    close(listener_);
  }
  int port() const { return port_; }

 private:
  void Accept() {
    for (;;) {
      const int fd = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      readers_.emplace_back([fd] {
        std::vector<char> buffer(kTcpWriteBytes);
        while (read(fd, buffer.data(), buffer.size()) > 0) {
        }
        close(fd);
      });
    }
  }
  int listener_ = -1;
  int port_ = 0;
  std::thread acceptor_;
  std::vector<std::thread> readers_;  // only the acceptor adds; joined after it ends
};

// `streams` connections to the sink at once, each writing 1 MiB at a time for about `seconds`;
// the clock stops when every reader has seen the end of its stream. Returns GB/s over all.
double TcpStreamsGbps(const std::string& host, int port, int streams, double seconds) {
  std::atomic<int64_t> bytes{0};
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < streams; ++t) {
    pool.emplace_back([&] {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port));
      if (fd < 0 || inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1 ||
          connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        Die("TCP reference: cannot connect to " + host + ": " + std::strerror(errno));
      }
      std::vector<char> chunk(kTcpWriteBytes, 1);
      int64_t sent = 0;
      while (SecondsSince(start) < seconds) {
        for (size_t at = 0; at < chunk.size();) {
          const ssize_t n = write(fd, chunk.data() + at, chunk.size() - at);
          if (n <= 0) Die(std::string("TCP reference: write: ") + std::strerror(errno));
          at += static_cast<size_t>(n);
        }
        sent += static_cast<int64_t>(chunk.size());
      }
      shutdown(fd, SHUT_WR);
      char byte;
      while (read(fd, &byte, 1) > 0) {
      }
      close(fd);
      bytes += sent;
    });
  }
  for (auto& th : pool) th.join();
  return static_cast<double>(bytes) / SecondsSince(start) / 1e9;
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

PlainServer StartPlain(const std::string& bind_host, size_t bytes) {
  PlainServer p;
  p.service = std::make_unique<PlainService>(bytes);
  grpc::ServerBuilder b;
  b.AddListeningPort(bind_host + ":0", grpc::InsecureServerCredentials(), &p.port);
  b.SetMaxReceiveMessageSize(kMaxMessage);
  b.SetMaxSendMessageSize(kMaxMessage);
  b.RegisterService(p.service.get());
  p.server = b.BuildAndStart();
  if (p.server == nullptr) Die("plain server: cannot listen on " + bind_host);
  return p;
}

// One plain worker: a typed stub per shard; a call sends each shard its range at once.
class PlainWorker {
 public:
  PlainWorker(const std::string& host, const std::vector<int>& ports, int64_t total)
      : total_(total) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMaxMessage);
    args.SetMaxSendMessageSize(kMaxMessage);
    args.SetInt("ps.bench.plain", 1);  // a channel of its own, not shared with other workers
    for (int port : ports) {
      stubs_.push_back(ps::v1::ParameterServer::NewStub(grpc::CreateCustomChannel(
          host + ":" + std::to_string(port), grpc::InsecureChannelCredentials(), args)));
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
      if (!s.ok()) Die("plain call failed: " + s.error_message());
    }
  }
  int64_t total_;
  std::vector<std::unique_ptr<ps::v1::ParameterServer::Stub>> stubs_;
};

// W workers and S shards of ps_server's real service, reached as `transport` says.
struct Cluster {
  std::vector<std::unique_ptr<ps::ShardServer>> shards;
  std::vector<std::unique_ptr<ps::GrpcParameterClient>> workers;
};

Cluster StartCluster(const Sites& sites, int workers, int shards, int64_t total,
                     bool shared_memory) {
  Cluster c;
  const uint64_t fingerprint = 0xbe4c4;
  const ps::ConsistencyMode mode =
      absl::GetFlag(FLAGS_mode) == "bsp" ? ps::ConsistencyMode::kBsp : ps::ConsistencyMode::kAsp;
  std::vector<std::string> servers;
  AtServers(sites, [&] {
    for (int s = 0; s < shards; ++s) {
      ps::ShardServerOptions o;
      o.host = sites.bind_host;
      o.shard.shard_id = s;
      o.shard.num_shards = shards;
      o.shard.consistency.mode = mode;
      o.shard.consistency.num_workers = workers;
      o.shard.optimizer.lr = 1e-9f;
      o.shard.lease = absl::Minutes(10);
      o.max_message_bytes = kMaxMessage;
      auto server = ps::ShardServer::Start(o);
      if (!server.ok()) Die("shard: " + server.status().ToString());
      servers.push_back(sites.dial_host + ":" + std::to_string((*server)->port()));
      c.shards.push_back(std::move(*server));
    }
  });
  std::vector<float> init(total, 0.5f);
  for (int w = 0; w < workers; ++w) {
    ps::GrpcClientOptions o;
    o.servers = servers;
    o.fingerprint = fingerprint;
    o.total_params = total;
    o.max_message_bytes = kMaxMessage;
    // Checked in main.
    if (const absl::Status t = ps::SetTransferFromFlags(o); !t.ok()) Die(t.ToString());
    o.shared_memory = shared_memory;
    o.local_calls = absl::GetFlag(FLAGS_local_calls);
    auto client = ps::GrpcParameterClient::Create(o);
    absl::Status s = client.status();
    if (s.ok()) s = (*client)->Register(w, absl::Seconds(30)).status();
    if (s.ok() && w == 0) s = (*client)->Init(init);
    if (s.ok() && (*client)->shared_memory_shards() != (shared_memory ? shards : 0)) {
      s = absl::InternalError("shared memory was not attached as asked");
    }
    if (!s.ok()) Die("worker " + std::to_string(w) + ": " + s.ToString());
    c.workers.push_back(std::move(*client));
  }
  return c;
}

// Everything one model size is measured with: a cluster per transport, the plain gRPC servers
// and workers, and each worker's buffers, clocks and versions.
class Rig {
 public:
  Rig(const Sites& sites, int workers, int shards, int64_t total,
      const std::vector<std::string>& transports)
      : workers_(workers),
        grads_(workers, std::vector<float>(total, 1e-3f)),
        params_(workers, std::vector<float>(total, 0.0f)) {
    for (const std::string& t : transports) {
      clusters_.push_back(StartCluster(sites, workers, shards, total, t != "grpc"));
    }
    std::vector<int> plain_ports;
    AtServers(sites, [&] {
      for (int s = 0; s < shards; ++s) {
        plain_servers_.push_back(StartPlain(sites.bind_host, total * sizeof(float)));
        plain_ports.push_back(plain_servers_.back().port);
      }
    });
    for (int w = 0; w < workers; ++w) {
      plain_.push_back(std::make_unique<PlainWorker>(sites.dial_host, plain_ports, total));
    }
    clocks_.assign(clusters_.size(), std::vector<int64_t>(workers, 0));
    versions_.assign(clusters_.size(),
                     std::vector<std::vector<int64_t>>(workers, std::vector<int64_t>(shards)));
    // shm_direct: each worker's buffers are its client's transport buffers.
    own_.resize(clusters_.size());
    for (size_t c = 0; c < clusters_.size(); ++c) {
      for (int w = 0; w < workers; ++w) {
        ps::TransportBuffers b;
        if (transports[c] == "shm_direct") {
          b = clusters_[c].workers[w]->TakeTransportBuffers(0);
          std::fill(b.gradient.begin(), b.gradient.end(), 1e-3f);
        } else {
          b.weights = absl::MakeSpan(params_[w]);
          b.gradient = absl::MakeSpan(grads_[w]);
        }
        own_[c].push_back(b);
      }
    }
  }
  ~Rig() {
    for (auto& p : plain_servers_) p.server->Shutdown();
  }

  size_t clusters() const { return clusters_.size(); }
  int workers() const { return workers_; }

  void Push(size_t c, int w) {
    auto r = clusters_[c].workers[w]->Push(clocks_[c][w], versions_[c][w], 32, own_[c][w].gradient);
    if (!r.ok()) Die("push: " + r.status().ToString());
    ++clocks_[c][w];
  }
  void Pull(size_t c, int w) {
    auto r = clusters_[c].workers[w]->Pull(clocks_[c][w], false, own_[c][w].weights);
    if (!r.ok()) Die("pull: " + r.status().ToString());
    versions_[c][w] = r->versions;
  }
  // A training step's call: push this clock, pull the next one's weights.
  void PushPull(size_t c, int w) {
    const int64_t clock = clocks_[c][w];
    auto r = clusters_[c].workers[w]->PushPull(clock, versions_[c][w], 32, own_[c][w].gradient,
                                               clock + 1, own_[c][w].weights);
    if (!r.ok()) Die("push_pull: " + r.status().ToString());
    ++clocks_[c][w];
    versions_[c][w] = r->pulled.versions;
  }
  void PlainPush(int w) { plain_[w]->Push(grads_[w]); }
  void PlainPull(int w) { plain_[w]->Pull(&params_[w]); }

 private:
  int workers_;
  std::vector<Cluster> clusters_;
  std::vector<PlainServer> plain_servers_;
  std::vector<std::unique_ptr<PlainWorker>> plain_;
  std::vector<std::vector<float>> grads_;
  std::vector<std::vector<float>> params_;
  std::vector<std::vector<int64_t>> clocks_;                 // [cluster][worker]
  std::vector<std::vector<std::vector<int64_t>>> versions_;  // [cluster][worker][shard]
  std::vector<std::vector<ps::TransportBuffers>> own_;       // [cluster][worker]
};

double MemcpyGbps(size_t bytes, double seconds) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  const double calls = CallsPerSecond(1, seconds, [&](int) {
                         std::memcpy(b.data(), a.data(), bytes);
                         asm volatile("" : : "r"(b.data()) : "memory");
                       }).per_second;
  return calls * bytes / 1e9;
}

// The median of `op`'s durations in microseconds, over calls on `threads` threads for about
// `seconds` (at least 5 calls each).
template <typename Op>
double MedianMicros(int threads, double seconds, Op op) {
  absl::Mutex mu;
  std::vector<double> all;
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<double> mine;
      while (mine.size() < 5 || SecondsSince(start) < seconds) {
        const auto call = Clock::now();
        op(t);
        mine.push_back(SecondsSince(call) * 1e6);
      }
      absl::MutexLock lock(&mu);
      all.insert(all.end(), mine.begin(), mine.end());
    });
  }
  for (auto& th : pool) th.join();
  std::nth_element(all.begin(), all.begin() + all.size() / 2, all.end());
  return all[all.size() / 2];
}

// Milliseconds until every worker has made `calls` calls back to back, pushes and pulls in turn.
template <typename PushOp, typename PullOp>
double BurstMillis(int workers, int calls, PushOp push, PullOp pull) {
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&, w] {
      for (int i = 0; i < calls; ++i) i % 2 == 0 ? push(w) : pull(w);
    });
  }
  for (auto& th : pool) th.join();
  return SecondsSince(start) * 1e3;
}

// Microseconds for the first touch of one 4 KiB page of fresh anonymous memory (the page fault
// and the zeroing), the best of three 64 MiB mappings. The price behind faults_per_call: tens of
// nanoseconds on bare metal, far more under nested virtualisation.
double PageFaultMicros() {
  constexpr size_t kBytes = size_t{64} << 20;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  double best = 1e18;
  for (int i = 0; i < 3; ++i) {
    void* mapping =
        mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping == MAP_FAILED)
      Die(std::string("page fault reference: mmap: ") + std::strerror(errno));
    auto* bytes = static_cast<volatile char*>(mapping);
    const auto start = Clock::now();
    for (size_t at = 0; at < kBytes; at += page) bytes[at] = 1;
    best = std::min(best, SecondsSince(start) * 1e6 / static_cast<double>(kBytes / page));
    munmap(mapping, kBytes);
  }
  return best;
}

ps::JsonObject Line(const char* op, const std::string& transport, int workers, int shards) {
  ps::JsonObject line;
  line.Add("bench", "transport")
      .Add("op", op)
      .Add("transport", transport)
      .Add("local_calls", transport != "grpc" && absl::GetFlag(FLAGS_local_calls))
      .Add("path", absl::GetFlag(FLAGS_server_netns).empty() ? "loopback" : "netns")
      .Add("mode", absl::GetFlag(FLAGS_mode))
      .Add("workers", workers)
      .Add("shards", shards);
  return line;
}

void Print(const ps::JsonObject& line) {
  std::printf("%s\n", line.str().c_str());
  std::fflush(stdout);
}

// The small-message figures of one config: 64 KiB round trips and 1 000-call bursts of 1 KiB.
void MeasureSmall(const Sites& sites, int workers, int shards,
                  const std::vector<std::string>& transports, double seconds, int rounds) {
  constexpr int64_t kRoundTripFloats = 16 << 10;  // 64 KiB
  constexpr int64_t kBurstFloats = 256;           // 1 KiB
  constexpr int kBurstCalls = 1000;
  Rig trip(sites, workers, shards, kRoundTripFloats, transports);
  Rig burst(sites, workers, shards, kBurstFloats, transports);
  const size_t n = transports.size();
  // [transport] ours, best (smallest) over rounds; the plain call's the same.
  std::vector<double> push_us(n, 1e18), pull_us(n, 1e18), burst_ms(n, 1e18);
  double plain_push_us = 1e18, plain_pull_us = 1e18, plain_burst_ms = 1e18;
  for (int round = 0; round < rounds; ++round) {
    for (size_t c = 0; c < n; ++c) {
      push_us[c] =
          std::min(push_us[c], MedianMicros(workers, seconds / 2, [&](int w) { trip.Push(c, w); }));
      pull_us[c] =
          std::min(pull_us[c], MedianMicros(workers, seconds / 2, [&](int w) { trip.Pull(c, w); }));
      burst_ms[c] =
          std::min(burst_ms[c], BurstMillis(
                                    workers, kBurstCalls, [&](int w) { burst.Push(c, w); },
                                    [&](int w) { burst.Pull(c, w); }));
    }
    plain_push_us = std::min(plain_push_us,
                             MedianMicros(workers, seconds / 2, [&](int w) { trip.PlainPush(w); }));
    plain_pull_us = std::min(plain_pull_us,
                             MedianMicros(workers, seconds / 2, [&](int w) { trip.PlainPull(w); }));
    plain_burst_ms =
        std::min(plain_burst_ms, BurstMillis(
                                     workers, kBurstCalls, [&](int w) { burst.PlainPush(w); },
                                     [&](int w) { burst.PlainPull(w); }));
  }
  for (size_t c = 0; c < n; ++c) {
    Print(Line("push_64k", transports[c], workers, shards)
              .Add("us", push_us[c])
              .Add("grpc_us", plain_push_us)
              .Add("ratio_vs_grpc", plain_push_us / push_us[c]));
    Print(Line("pull_64k", transports[c], workers, shards)
              .Add("us", pull_us[c])
              .Add("grpc_us", plain_pull_us)
              .Add("ratio_vs_grpc", plain_pull_us / pull_us[c]));
    Print(Line("burst_1000", transports[c], workers, shards)
              .Add("ms", burst_ms[c])
              .Add("calls_per_sec", workers * kBurstCalls / (burst_ms[c] / 1e3))
              .Add("grpc_ms", plain_burst_ms)
              .Add("ratio_vs_grpc", plain_burst_ms / burst_ms[c]));
  }
}

// The bulk figures of one config and model size: GB/s of pushes and pulls against the references.
void MeasureBulk(const Sites& sites, int workers, int shards, int mib,
                 const std::vector<std::string>& transports, double seconds, int rounds) {
  const size_t bytes = static_cast<size_t>(mib) << 20;
  const int64_t total = static_cast<int64_t>(bytes / sizeof(float));
  Rig rig(sites, workers, shards, total, transports);
  std::unique_ptr<TcpSink> sink;
  AtServers(sites, [&] { sink = std::make_unique<TcpSink>(sites.bind_host); });
  const std::vector<std::string> ops = absl::GetFlag(FLAGS_ops);
  constexpr int kOps = 3;
  const char* const op_names[kOps] = {"push", "pull", "push_pull"};
  bool do_op[kOps];
  for (int op = 0; op < kOps; ++op) {
    do_op[op] = std::find(ops.begin(), ops.end(), op_names[op]) != ops.end();
  }
  // [op][transport]: ours; [op] plain gRPC (a push then a pull for push_pull); the best GB/s and
  // the fewest faults per call over rounds (the first round also pays for first touches).
  std::vector<std::vector<double>> best(kOps, std::vector<double>(rig.clusters(), 0.0));
  std::vector<std::vector<double>> faults(kOps, std::vector<double>(rig.clusters(), 1e18));
  double best_plain[kOps] = {0, 0, 0};
  double plain_faults[kOps] = {1e18, 1e18, 1e18};
  double memcpy_gbps = 0, tcp_gbps = 0;
  const bool references = absl::GetFlag(FLAGS_references);
  for (int round = 0; round < rounds; ++round) {
    for (int op = 0; op < kOps; ++op) {
      if (!do_op[op]) continue;
      // A PushPull moves the model both ways.
      const double per_call = static_cast<double>(op == 2 ? 2 * bytes : bytes) / 1e9;
      for (size_t c = 0; c < rig.clusters(); ++c) {
        const CallRate rate = CallsPerSecond(workers, seconds, [&](int w) {
          if (op == 0) rig.Push(c, w);
          if (op == 1) rig.Pull(c, w);
          if (op == 2) rig.PushPull(c, w);
        });
        best[op][c] = std::max(best[op][c], per_call * rate.per_second);
        faults[op][c] = std::min(faults[op][c], rate.faults_per_call);
      }
      if (!references) continue;
      const CallRate plain = CallsPerSecond(workers, seconds, [&](int w) {
        if (op != 1) rig.PlainPush(w);
        if (op != 0) rig.PlainPull(w);
      });
      best_plain[op] = std::max(best_plain[op], per_call * plain.per_second);
      plain_faults[op] = std::min(plain_faults[op], plain.faults_per_call);
    }
    if (!references) continue;
    tcp_gbps = std::max(tcp_gbps, TcpStreamsGbps(sites.dial_host, sink->port(), workers, seconds));
    memcpy_gbps = std::max(memcpy_gbps, MemcpyGbps(bytes, seconds / 2));
  }
  for (int op = 0; op < kOps; ++op) {
    if (!do_op[op]) continue;
    for (size_t c = 0; c < rig.clusters(); ++c) {
      const double ours = best[op][c];
      ps::JsonObject line = Line(op_names[op], transports[c], workers, shards);
      line.Add("mib", mib)
          .Add("chunk_mib", absl::GetFlag(FLAGS_chunk_mib))
          .Add("connections", absl::GetFlag(FLAGS_connections))
          .Add("split_lone_pulls", absl::GetFlag(FLAGS_split_lone_pulls))
          .Add("split_lone_pushes", absl::GetFlag(FLAGS_split_lone_pushes))
          .Add("push_pull_split_mib", absl::GetFlag(FLAGS_push_pull_split_mib))
          .Add("gbps", ours)
          .Add("faults_per_call", faults[op][c]);
      if (!references) {
        Print(line);
        continue;
      }
      if (op == 2) {  // both ways: the one-way references do not compare
        Print(line.Add("grpc_gbps", best_plain[op])
                  .Add("grpc_faults_per_call", plain_faults[op])
                  .Add("ratio_vs_grpc", ours / best_plain[op]));
        continue;
      }
      Print(line.Add("tcp_gbps", tcp_gbps)
                .Add("grpc_gbps", best_plain[op])
                .Add("grpc_faults_per_call", plain_faults[op])
                .Add("memcpy_gbps", memcpy_gbps)
                .Add("ratio_vs_tcp", ours / tcp_gbps)
                .Add("ratio_vs_grpc", ours / best_plain[op])
                .Add("ratio_vs_memcpy", ours / memcpy_gbps));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  ps::TuneProcessForTensorTraffic();  // as ps_server and ps_worker do; the references get it too
  ps::ParseCommandLine(argc, argv,
                       "Push and pull throughput against a TCP stream, plain gRPC and memcpy.\n"
                       "  ps_bench_transport [--mib 1,16,64] [--configs 1x1,2x2] [--seconds 1.5]\n"
                       "                     [--transports grpc,shm,shm_direct] [--small]\n"
                       "                     [--ops push,pull,push_pull] [--mode asp|bsp]\n"
                       "                     [--server_netns NAME --host ADDR]");
  spdlog::set_level(spdlog::level::warn);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  Sites sites;
  sites.netns = absl::GetFlag(FLAGS_server_netns);
  sites.dial_host = absl::GetFlag(FLAGS_host);
  sites.bind_host = sites.netns.empty() ? sites.dial_host : "0.0.0.0";
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "asp" && mode != "bsp") {
    std::fprintf(stderr, "--mode: '%s' is not asp or bsp\n", mode.c_str());
    return 2;
  }
  for (const std::string& op : absl::GetFlag(FLAGS_ops)) {
    if (op != "push" && op != "pull" && op != "push_pull") {
      std::fprintf(stderr, "--ops: '%s' is not push, pull or push_pull\n", op.c_str());
      return 2;
    }
  }
  if (const absl::Status s = ps::CheckTransferFlags(); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 2;
  }
  const std::vector<std::string> transports = absl::GetFlag(FLAGS_transports);
  for (const std::string& t : transports) {
    if (t != "grpc" && t != "shm" && t != "shm_direct") {
      std::fprintf(stderr, "--transports: '%s' is not grpc, shm or shm_direct\n", t.c_str());
      return 2;
    }
    if (t != "grpc" && !sites.netns.empty()) {
      std::fprintf(stderr, "--server_netns: the shards are on another host; only grpc applies\n");
      return 2;
    }
  }
  std::vector<std::pair<int, int>> configs;
  for (const std::string& config : absl::GetFlag(FLAGS_configs)) {
    std::vector<std::string> parts = absl::StrSplit(config, 'x');
    int workers = 0, shards = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &workers) ||
        !absl::SimpleAtoi(parts[1], &shards) || workers < 1 || shards < 1) {
      std::fprintf(stderr, "--configs: '%s' is not WORKERSxSHARDS\n", config.c_str());
      return 2;
    }
    if (mode == "bsp" && workers != 1) {
      std::fprintf(stderr, "--mode bsp: one worker only (its pushes are rounds of one)\n");
      return 2;
    }
    configs.emplace_back(workers, shards);
  }
  std::vector<int> sizes;
  for (const std::string& mib_text : absl::GetFlag(FLAGS_mib)) {
    int mib = 0;
    if (!absl::SimpleAtoi(mib_text, &mib) || mib < 1 || mib > 128) {
      std::fprintf(stderr, "--mib: '%s' is not in [1, 128]\n", mib_text.c_str());
      return 2;
    }
    sizes.push_back(mib);
  }
  if (absl::GetFlag(FLAGS_bulk) && absl::GetFlag(FLAGS_references)) {
    ps::JsonObject line;
    line.Add("bench", "transport").Add("op", "page_fault").Add("us", PageFaultMicros());
    Print(line);
  }
  for (const auto& [workers, shards] : configs) {
    if (absl::GetFlag(FLAGS_small)) {
      MeasureSmall(sites, workers, shards, transports, seconds, rounds);
    }
    if (!absl::GetFlag(FLAGS_bulk)) continue;
    for (int mib : sizes) MeasureBulk(sites, workers, shards, mib, transports, seconds, rounds);
  }
  return 0;
}
