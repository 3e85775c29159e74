#include "common/transport/local_frames.h"

#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "common/transport/tensor_wire.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

// Both ends of a connected Unix stream socket pair, closed at scope exit.
struct SocketPair {
  SocketPair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd), 0); }
  ~SocketPair() {
    for (int f : fd) {
      if (f >= 0) close(f);
    }
  }
  int fd[2] = {-1, -1};
};

std::string Bytes(const grpc::ByteBuffer& body, size_t* slice_count) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(body.Dump(&slices).ok());
  *slice_count = slices.size();
  std::string out;
  for (const grpc::Slice& s : slices) out.append(s.begin(), s.end());
  return out;
}

TEST(LocalFramesTest, ALargeBodyArrivesIntactInSlicesOfAtMostFourMiB) {
  // Two payload slices on the way out (as a lent pull reply has), 9 MiB + 3 bytes in all.
  std::string first(5 << 20, '\0'), second((4 << 20) + 3, '\0');
  for (size_t i = 0; i < first.size(); ++i) first[i] = static_cast<char>(i * 7);
  for (size_t i = 0; i < second.size(); ++i) second[i] = static_cast<char>(i * 13 + 1);
  std::vector<grpc::Slice> out = {grpc::Slice(first), grpc::Slice(second)};
  const grpc::ByteBuffer sent(out.data(), out.size());
  SocketPair pair;
  LocalFrameHeader header;
  header.method_or_code = static_cast<uint32_t>(LocalMethod::kPush);
  header.timeout_ms = 250;
  // The socket buffer holds far less than 9 MiB: the writer needs its own thread.
  absl::Status written;
  std::thread writer([&] { written = WriteLocalFrame(pair.fd[0], header, sent); });
  LocalFrameHeader got_header;
  grpc::ByteBuffer body;
  const absl::Status read = ReadLocalFrame(pair.fd[1], &got_header, &body);
  writer.join();
  ASSERT_TRUE(written.ok()) << written;
  ASSERT_TRUE(read.ok()) << read;
  EXPECT_EQ(got_header.method_or_code, static_cast<uint32_t>(LocalMethod::kPush));
  EXPECT_EQ(got_header.timeout_ms, 250u);
  EXPECT_EQ(got_header.length, first.size() + second.size());
  size_t slices = 0;
  EXPECT_EQ(Bytes(body, &slices), first + second);
  EXPECT_EQ(slices, 3u);  // 4 + 4 + 1 MiB (and 3 bytes)
  static_assert(kPayloadSliceBytes == size_t{4} << 20);
}

TEST(LocalFramesTest, AnEmptyBodyAndTextRoundTrip) {
  SocketPair pair;
  LocalFrameHeader header;
  header.method_or_code = 16;  // UNAUTHENTICATED, as a refused hello is answered
  ASSERT_TRUE(WriteLocalFrame(pair.fd[0], header, std::string("wrong token")).ok());
  ASSERT_TRUE(WriteLocalFrame(pair.fd[0], LocalFrameHeader{}, grpc::ByteBuffer()).ok());
  LocalFrameHeader got;
  grpc::ByteBuffer body;
  ASSERT_TRUE(ReadLocalFrame(pair.fd[1], &got, &body).ok());
  EXPECT_EQ(got.method_or_code, 16u);
  EXPECT_EQ(LocalFrameText(body), "wrong token");
  ASSERT_TRUE(ReadLocalFrame(pair.fd[1], &got, &body).ok());
  EXPECT_EQ(got.length, 0u);
  EXPECT_EQ(LocalFrameText(body), "");
}

TEST(LocalFramesTest, AnOversizedLengthIsDataLossAndAClosedPeerIsUnavailable) {
  SocketPair pair;
  const LocalFrameHeader corrupt{1, 0, kMaxLocalFrameBytes + 1};
  ASSERT_EQ(write(pair.fd[0], &corrupt, sizeof(corrupt)), static_cast<ssize_t>(sizeof(corrupt)));
  LocalFrameHeader got;
  grpc::ByteBuffer body;
  EXPECT_EQ(ReadLocalFrame(pair.fd[1], &got, &body).code(), absl::StatusCode::kDataLoss);
  // A frame cut short by the peer going away.
  const LocalFrameHeader promised{1, 0, 100};
  ASSERT_EQ(write(pair.fd[0], &promised, sizeof(promised)), static_cast<ssize_t>(sizeof(promised)));
  ASSERT_EQ(write(pair.fd[0], "abc", 3), 3);
  close(pair.fd[0]);
  pair.fd[0] = -1;
  EXPECT_EQ(ReadLocalFrame(pair.fd[1], &got, &body).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(WriteLocalFrame(pair.fd[1], got, std::string("x")).code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ps
