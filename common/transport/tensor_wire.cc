#include "common/transport/tensor_wire.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "grpc/slice.h"

namespace ps {

grpc::Slice BorrowedPayload::Borrow(const void* data, size_t size) {
  {
    absl::MutexLock lock(&mu_);
    ++outstanding_;
  }
  grpc_slice s = grpc_slice_new_with_user_data(const_cast<void*>(data), size, &Release, this);
  return grpc::Slice(s, grpc::Slice::STEAL_REF);
}

void BorrowedPayload::Release(void* self) {
  auto* payload = static_cast<BorrowedPayload*>(self);
  absl::MutexLock lock(&payload->mu_);
  --payload->outstanding_;
}

void BorrowedPayload::WaitUntilReleased() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* outstanding) { return *outstanding == 0; }, &outstanding_));
}

grpc::Slice LendSlice(const void* data, size_t size, std::shared_ptr<const void> owner) {
  auto* held = new std::shared_ptr<const void>(std::move(owner));
  grpc_slice s = grpc_slice_new_with_user_data(
      const_cast<void*>(data), size,
      [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); }, held);
  return grpc::Slice(s, grpc::Slice::STEAL_REF);
}

std::vector<grpc::Slice> AllocatePayloadSlices(size_t bytes, size_t unit) {
  const size_t chunk = kPayloadSliceBytes / unit * unit;
  std::vector<grpc::Slice> slices;
  slices.reserve(bytes / chunk + 1);
  for (size_t at = 0; at < bytes; at += chunk) slices.emplace_back(std::min(chunk, bytes - at));
  return slices;
}

namespace {

void AppendVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// Reads the protobuf wire format across the slices of a message, in place.
class SliceReader {
 public:
  explicit SliceReader(const std::vector<grpc::Slice>& slices) : slices_(slices) { SkipEmpty(); }
  bool done() const { return index_ == slices_.size(); }

  bool ReadByte(uint8_t* b) {
    if (done()) return false;
    *b = slices_[index_].begin()[offset_];
    Advance(1);
    return true;
  }
  bool ReadVarint(uint64_t* v, std::string* raw) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      if (raw != nullptr) raw->push_back(static_cast<char>(b));
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  // Consumes n bytes, appending them to `copy` or their views to `views`.
  bool Take(uint64_t n, std::string* copy, std::vector<absl::Span<const char>>* views) {
    while (n > 0) {
      if (done()) return false;
      const grpc::Slice& s = slices_[index_];
      const size_t here = std::min<uint64_t>(n, s.size() - offset_);
      const char* p = reinterpret_cast<const char*>(s.begin()) + offset_;
      if (copy != nullptr) copy->append(p, here);
      if (views != nullptr) views->emplace_back(p, here);
      Advance(here);
      n -= here;
    }
    return true;
  }

 private:
  void Advance(size_t n) {
    offset_ += n;
    if (offset_ == slices_[index_].size()) {
      ++index_;
      offset_ = 0;
      SkipEmpty();
    }
  }
  void SkipEmpty() {
    while (index_ < slices_.size() && slices_[index_].size() == 0) ++index_;
  }
  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0;
  size_t offset_ = 0;
};

absl::Status Malformed(const char* why) {
  return absl::InvalidArgumentError(absl::StrCat("malformed message: ", why));
}

}  // namespace

grpc::ByteBuffer JoinPayloadMessage(const google::protobuf::MessageLite& header, int payload_field,
                                    std::vector<grpc::Slice> payload) {
  std::string head = header.SerializeAsString();
  size_t length = 0;
  for (const grpc::Slice& s : payload) length += s.size();
  AppendVarint((static_cast<uint64_t>(payload_field) << 3) | 2, &head);
  AppendVarint(length, &head);
  std::vector<grpc::Slice> slices;
  slices.reserve(payload.size() + 1);
  slices.emplace_back(head);
  for (grpc::Slice& s : payload) slices.push_back(std::move(s));
  return grpc::ByteBuffer(slices.data(), slices.size());
}

absl::Status SplitPayloadMessage(const grpc::ByteBuffer& buffer, int payload_field,
                                 google::protobuf::MessageLite* header, SplitMessage* out) {
  out->slices.clear();
  out->payload.clear();
  if (!buffer.Dump(&out->slices).ok()) return Malformed("unreadable buffer");
  SliceReader in(out->slices);
  std::string head;
  while (!in.done()) {
    uint64_t key;
    std::string raw;
    if (!in.ReadVarint(&key, &raw)) return Malformed("truncated field key");
    const uint64_t field = key >> 3;
    const int wire_type = static_cast<int>(key & 7);
    if (field == 0) return Malformed("field number 0");
    switch (wire_type) {
      case 0: {
        uint64_t v;
        if (!in.ReadVarint(&v, &raw)) return Malformed("truncated varint");
        break;
      }
      case 1:
        if (!in.Take(8, &raw, nullptr)) return Malformed("truncated fixed64");
        break;
      case 5:
        if (!in.Take(4, &raw, nullptr)) return Malformed("truncated fixed32");
        break;
      case 2: {
        uint64_t length;
        if (!in.ReadVarint(&length, &raw)) return Malformed("truncated length");
        if (field == static_cast<uint64_t>(payload_field)) {
          out->payload.clear();  // the last occurrence counts
          if (!in.Take(length, nullptr, &out->payload)) return Malformed("truncated payload");
          continue;  // not part of the header
        }
        if (!in.Take(length, &raw, nullptr)) return Malformed("truncated bytes field");
        break;
      }
      default:
        return Malformed("unsupported wire type");
    }
    head += raw;
  }
  if (!header->ParseFromString(head)) return Malformed("header fields do not parse");
  return absl::OkStatus();
}

grpc::ByteBuffer SerializeToByteBuffer(const google::protobuf::MessageLite& message) {
  grpc::Slice slice(message.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

absl::Status ParseFromByteBuffer(const grpc::ByteBuffer& buffer,
                                 google::protobuf::MessageLite* message) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return Malformed("unreadable buffer");
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  if (!message->ParseFromString(bytes)) return Malformed("does not parse");
  return absl::OkStatus();
}

}  // namespace ps
