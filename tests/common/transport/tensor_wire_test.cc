#include "common/transport/tensor_wire.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "proto/parameter_server.pb.h"

namespace ps {
namespace {

constexpr int kGradient = ps::v1::PushRequest::kGradientFieldNumber;

std::string Flatten(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// The same bytes re-cut every `every` bytes, as the transport might deliver them.
grpc::ByteBuffer Recut(const std::string& bytes, size_t every) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += every) {
    slices.emplace_back(bytes.data() + at, std::min(every, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

ps::v1::PushRequest Header() {
  ps::v1::PushRequest h;
  h.set_rank(3);
  h.set_layout_fingerprint(0x1234567890abcdefULL);
  h.set_begin(10);
  h.set_end(14);
  h.set_clock(-1);  // a ten-byte varint
  h.set_encoding(ps::v1::BF16);
  return h;
}

TEST(TensorWire, JoinedMessageIsPlainProtobuf) {
  const std::string payload = "0123456789abcdef";
  std::vector<grpc::Slice> parts;
  parts.emplace_back(payload.substr(0, 5));
  parts.emplace_back(payload.substr(5));
  const grpc::ByteBuffer b = JoinPayloadMessage(Header(), kGradient, std::move(parts));
  ps::v1::PushRequest typed;
  ASSERT_TRUE(typed.ParseFromString(Flatten(b)));
  EXPECT_EQ(typed.gradient(), payload);
  EXPECT_EQ(typed.rank(), 3);
  EXPECT_EQ(typed.clock(), -1);
  EXPECT_EQ(typed.encoding(), ps::v1::BF16);
}

TEST(TensorWire, SplitReadsHeaderAndPayloadInPlaceAtAnyCut) {
  ps::v1::PushRequest full = Header();
  std::string payload(1000, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7);
  full.set_gradient(payload);
  const std::string bytes = full.SerializeAsString();
  for (size_t every : {1, 3, 7, 64, 4096}) {
    const grpc::ByteBuffer b = Recut(bytes, every);
    ps::v1::PushRequest header;
    SplitMessage split;
    ASSERT_TRUE(SplitPayloadMessage(b, kGradient, &header, &split).ok()) << every;
    EXPECT_EQ(header.rank(), 3);
    EXPECT_EQ(header.layout_fingerprint(), 0x1234567890abcdefULL);
    EXPECT_EQ(header.clock(), -1);
    EXPECT_EQ(header.encoding(), ps::v1::BF16);
    EXPECT_TRUE(header.gradient().empty());  // not copied into the header
    std::string got;
    for (auto span : split.payload) got.append(span.data(), span.size());
    EXPECT_EQ(got, payload) << every;
  }
}

TEST(TensorWire, LastPayloadOccurrenceWinsAsInProtobuf) {
  ps::v1::PushRequest a;
  a.set_gradient("first");
  ps::v1::PushRequest b;
  b.set_gradient("second");
  const std::string bytes = a.SerializeAsString() + b.SerializeAsString();
  ps::v1::PushRequest typed;
  ASSERT_TRUE(typed.ParseFromString(bytes));
  ps::v1::PushRequest header;
  SplitMessage split;
  ASSERT_TRUE(SplitPayloadMessage(Recut(bytes, 4), kGradient, &header, &split).ok());
  std::string got;
  for (auto span : split.payload) got.append(span.data(), span.size());
  EXPECT_EQ(got, typed.gradient());
}

TEST(TensorWire, MalformedMessagesAreInvalidArgument) {
  ps::v1::PushRequest full = Header();
  full.set_gradient(std::string(100, 'x'));
  const std::string bytes = full.SerializeAsString();
  ps::v1::PushRequest header;
  SplitMessage split;
  // Truncated inside the payload.
  EXPECT_EQ(
      SplitPayloadMessage(Recut(bytes.substr(0, bytes.size() - 1), 9), kGradient, &header, &split)
          .code(),
      absl::StatusCode::kInvalidArgument);
  // A field key with wire type 7 does not exist.
  EXPECT_EQ(
      SplitPayloadMessage(Recut(std::string("\x0f", 1), 1), kGradient, &header, &split).code(),
      absl::StatusCode::kInvalidArgument);
  // Field number 0.
  EXPECT_EQ(
      SplitPayloadMessage(Recut(std::string("\x00\x01", 2), 1), kGradient, &header, &split).code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(TensorWire, BorrowedSlicesAreCountedUntilReleased) {
  const std::string memory = "borrowed bytes";
  BorrowedPayload borrowed;
  grpc::Slice slice = borrowed.Borrow(memory.data(), memory.size());
  EXPECT_EQ(slice.begin(), reinterpret_cast<const uint8_t*>(memory.data()));  // no copy
  std::thread release([s = std::move(slice)]() mutable {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    s = grpc::Slice();
  });
  borrowed.WaitUntilReleased();  // returns only after the thread dropped its reference
  release.join();
}

TEST(TensorWire, PayloadSlicesAreBoundedAndWholeUnits) {
  const size_t bytes = kPayloadSliceBytes * 2 + 8;
  std::vector<grpc::Slice> slices = AllocatePayloadSlices(bytes, 4);
  size_t total = 0;
  for (const auto& s : slices) {
    EXPECT_LE(s.size(), kPayloadSliceBytes);
    EXPECT_EQ(s.size() % 4, 0u);
    total += s.size();
  }
  EXPECT_EQ(total, bytes);
  EXPECT_TRUE(AllocatePayloadSlices(0, 4).empty());
}

}  // namespace
}  // namespace ps
