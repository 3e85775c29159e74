// Fuzzes the shard's request handlers through its gRPC service adapter, with arbitrary bytes
// parsed as requests in arbitrary order; Push and Pull bytes go raw through the in-place wire
// splitter (common/transport/tensor_wire.h), as the rpcs receive them. Checks, besides what ASan
// and UBSan catch:
// - a refused request leaves the weights and the version unchanged (but a PushPull whose pull
//   timed out has applied its push);
// - the version never goes backwards and the weights stay finite;
// - a snapshot restores into a fresh shard with the same weights, version and sparse tables;
// - a refused request leaves the sparse tables' rows unchanged too.
//
// Shared memory: an attach record gets a real region of this process (the fuzzed request names
// its rank, incarnation, size and slots; pid, fd and nonce are the region's), so later pushes
// with `shared_bytes` and pulls into shared memory reach the bounds checks and the region itself.
//
// Input: byte 0 picks the configuration (mode, optimizer, update rule, token on or off); then
// records of [op][length (1 byte)][length bytes of a serialized request].

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/shm/shared_memory.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/service.h"
#include "server/shard.h"

namespace {

using ps::ConsistencyMode;

struct World {
  std::unique_ptr<ps::Shard> shard;
  std::unique_ptr<ps::ParameterServerService> service;
};

World Make(uint8_t config) {
  ps::ShardOptions o;
  o.num_shards = 1 + (config >> 6 & 1);
  o.shard_id = 0;
  o.consistency.mode = static_cast<ConsistencyMode>(config % 3);
  o.consistency.staleness = (config >> 2) & 1;
  o.consistency.num_workers = 2;
  o.optimizer.kind = static_cast<ps::OptimizerKind>((config >> 3) % 3);
  o.update_rule.rule = o.consistency.mode == ConsistencyMode::kBsp
                           ? ps::UpdateRule::kPlain
                           : static_cast<ps::UpdateRule>((config >> 5) % 4);
  o.lease = absl::Hours(1);
  World w;
  w.shard = std::move(*ps::Shard::Create(o));
  ps::ServiceOptions s;
  s.max_pull_wait = absl::ZeroDuration();  // a pull that would wait fails at once
  if (config & 0x80) s.token = "fuzz-token";
  w.service = std::make_unique<ps::ParameterServerService>(*w.shard, s);
  return w;
}

bool SameTables(const std::vector<ps::Shard::TableStatus>& a,
                const std::vector<ps::Shard::TableStatus>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].rows != b[i].rows || a[i].bytes != b[i].bytes) return false;
  }
  return true;
}

bool AllFinite(const std::vector<float>& v) {
  for (float x : v) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

// The rpc's order: the token check (no metadata: UNAUTHENTICATED when a token is configured),
// then the handler.
template <typename Request, typename Response, typename Method>
grpc::Status Call(ps::ParameterServerService& service, Method method, const uint8_t* data,
                  size_t size) {
  Request request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return grpc::Status::CANCELLED;
  Response response;
  const grpc::Status auth = service.Authenticate({});
  if (!auth.ok()) return auth;
  return (service.*method)(request, &response);
}

// One region per size and slot count, kept for the whole run (regions are few and small).
ps::SharedMemory* RegionFor(int64_t total_params, int slots) {
  static std::map<std::pair<int64_t, int>, std::unique_ptr<ps::SharedMemory>> regions;
  if (total_params <= 0 || total_params > 4096) return nullptr;
  slots = std::max(slots, 1);
  if (slots > 4) return nullptr;
  auto& region = regions[{total_params, slots}];
  if (region == nullptr) {
    auto created = ps::SharedMemory::Create(8 * static_cast<size_t>(total_params) * slots);
    if (!created.ok()) std::abort();
    region = std::move(*created);
  }
  return region.get();
}

grpc::Status Attach(ps::ParameterServerService& service, const uint8_t* data, size_t size) {
  ps::v1::AttachSharedMemoryRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return grpc::Status::CANCELLED;
  if (const ps::SharedMemory* region = RegionFor(request.total_params(), request.slots())) {
    request.set_pid(region->pid());
    request.set_fd(region->fd());
    request.set_nonce(region->nonce());
  }
  const grpc::Status auth = service.Authenticate({});
  if (!auth.ok()) return auth;
  ps::v1::AttachSharedMemoryResponse response;
  return service.HandleAttachSharedMemory(request, &response);
}

grpc::ByteBuffer Raw(const uint8_t* data, size_t size) {
  grpc::Slice slice(data, size);
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  World w = Make(data[0]);
  using S = ps::ParameterServerService;
  size_t at = 1;
  int64_t last_version = 0;
  while (at + 2 <= size) {
    const uint8_t op = data[at];
    const size_t length = std::min<size_t>(data[at + 1], size - at - 2);
    const uint8_t* body = data + at + 2;
    at += 2 + length;
    const std::vector<float> before = w.shard->Values();
    const std::vector<ps::Shard::TableStatus> tables_before = w.shard->TableStatuses();
    const int64_t version_before = w.shard->GetStatus().version;
    grpc::Status st;
    bool pushed_then_waited = false;  // PushPull: applied its push, then its pull timed out
    switch (op % 9) {
      case 0:
        st = Call<ps::v1::RegisterRequest, ps::v1::RegisterResponse>(*w.service, &S::HandleRegister,
                                                                     body, length);
        break;
      case 1:
        st = Call<ps::v1::HeartbeatRequest, ps::v1::HeartbeatResponse>(
            *w.service, &S::HandleHeartbeat, body, length);
        break;
      case 2:
        st = Call<ps::v1::InitRequest, ps::v1::InitResponse>(*w.service, &S::HandleInit, body,
                                                             length);
        break;
      case 3: {
        grpc::ByteBuffer reply;
        st = w.service->Authenticate({});
        if (st.ok()) st = w.service->HandlePull(Raw(body, length), absl::Now(), &reply);
        break;
      }
      case 4: {
        grpc::ByteBuffer reply;
        st = w.service->Authenticate({});
        if (st.ok()) st = w.service->HandlePush(Raw(body, length), &reply);
        break;
      }
      case 5: {
        ps::v1::GetStatusResponse response;
        st = w.service->Authenticate({});
        if (st.ok()) st = w.service->HandleGetStatus(&response);
        break;
      }
      case 6: {
        const ps::Shard::Snapshot snapshot = w.shard->EncodeSnapshot();
        World copy = Make(data[0]);
        if (!copy.shard->RestoreSnapshot(snapshot.payload).ok()) std::abort();
        if (copy.shard->Values() != w.shard->Values()) std::abort();
        if (copy.shard->GetStatus().version != snapshot.version) std::abort();
        if (!SameTables(copy.shard->TableStatuses(), w.shard->TableStatuses())) std::abort();
        break;
      }
      case 7:
        st = Attach(*w.service, body, length);
        break;
      case 8: {
        grpc::ByteBuffer reply;
        st = w.service->Authenticate({});
        if (st.ok()) st = w.service->HandlePushPull(Raw(body, length), absl::Now(), &reply);
        pushed_then_waited = st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
        break;
      }
    }
    const int64_t version = w.shard->GetStatus().version;
    if (!st.ok() && !pushed_then_waited &&
        (w.shard->Values() != before || version != version_before ||
         !SameTables(w.shard->TableStatuses(), tables_before))) {
      std::abort();
    }
    if (version < last_version) std::abort();
    last_version = version;
    // Finite gradients on finite weights may still overflow to Inf with a huge learning rate;
    // ours is the default 0.01, and the shard refuses non-finite input.
    if (!AllFinite(w.shard->Values()) && AllFinite(before) && version == version_before) {
      std::abort();
    }
  }
  return 0;
}
