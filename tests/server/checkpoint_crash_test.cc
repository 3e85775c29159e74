// Kill -9 at random moments while checkpoints are being written, 50 times: after every kill the
// folder must hold a complete, intact checkpoint (never a torn one), and the newest one loaded
// must never go backwards.

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "common/storage/checkpoint.h"
#include "gtest/gtest.h"
#include "tests/support/scratch_dir.h"

extern char** environ;

namespace ps {
namespace {

// The helper binary lives beside this test.
std::string WriterPath() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().string() +
         "/checkpoint_writer";
}

bool HasTemporaryFile(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (absl::StartsWith(e.path().filename().string(), ".tmp-")) return true;
  }
  return false;
}

// The largest checkpoint number in `dir`, read from the names (0 when none). Does not open the
// folder through CheckpointDir, which would remove the writer's temporary file.
uint64_t NewestSequence(const std::string& dir) {
  uint64_t newest = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!absl::StartsWith(name, "ckpt-")) continue;
    newest = std::max<uint64_t>(newest, std::strtoull(name.c_str() + 5, nullptr, 10));
  }
  return newest;
}

class CheckpointCrash : public ScratchDirTest {};

TEST_F(CheckpointCrash, EveryRestartAfterAKillLoadsACompleteCheckpoint) {
  const std::string dir = Path("ckpt");  // made by the first writer that gets that far
  constexpr int kKills = 50;
  constexpr uint64_t kFloats = 1 << 20;  // 4 MiB per checkpoint
  std::mt19937 random(12345);
  std::uniform_int_distribution<int> delay_us(0, 150000);  // a few write cycles
  std::uniform_int_distribution<int> write_offset_us(0, 2000);
  uint64_t newest_seen = 0;
  int mid_write = 0;
  for (int i = 0; i < kKills; ++i) {
    const uint64_t first = uint64_t(i + 1) * 1000000;
    std::vector<std::string> args = {WriterPath(), dir, std::to_string(first),
                                     std::to_string(kFloats)};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    ASSERT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ), 0) << argv[0];
    // Once this writer has finished its first checkpoint it is in its steady loop. Every other
    // kill then waits for a write in progress (its temporary file) and lands 0-2 ms into it;
    // the others land at a uniformly random moment of the loop.
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (absl::Now() < give_up && NewestSequence(dir) < first) {
      absl::SleepFor(absl::Microseconds(500));
    }
    if (i % 2 == 0) {
      while (absl::Now() < give_up && !HasTemporaryFile(dir)) {
        absl::SleepFor(absl::Microseconds(100));
      }
      absl::SleepFor(absl::Microseconds(write_offset_us(random)));
    } else {
      absl::SleepFor(absl::Microseconds(delay_us(random)));
    }
    kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer stopped on its own: status " << status;
    if (!std::filesystem::exists(dir)) continue;  // killed before it made the folder
    mid_write += HasTemporaryFile(dir);

    // What a restarted shard does: open the folder, load the newest intact checkpoint.
    auto d = CheckpointDir::Open(dir, 2);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_FALSE(HasTemporaryFile(dir));
    std::vector<std::string> skipped;
    auto loaded = d->LoadNewest(&skipped);
    if (loaded.status().code() == absl::StatusCode::kNotFound && newest_seen == 0) continue;
    ASSERT_TRUE(loaded.ok()) << "kill " << i << ": " << loaded.status();
    EXPECT_TRUE(skipped.empty()) << "kill " << i << " left a damaged file: " << skipped[0];
    ByteReader r(loaded->payload);
    const uint64_t seq = *r.U64("seq");
    EXPECT_EQ(seq, loaded->info.sequence);
    auto values = r.Floats("values", kFloats);
    ASSERT_TRUE(values.ok());
    ASSERT_EQ(values->size(), kFloats);
    for (float v : *values) ASSERT_EQ(v, static_cast<float>(seq)) << "kill " << i;
    EXPECT_GE(seq, newest_seen);  // equal when the writer was killed before it finished one
    newest_seen = seq;
  }
  EXPECT_GT(newest_seen, 0u) << "no checkpoint was ever completed";
  // The test must have hit writes in progress, or it proves nothing.
  EXPECT_GE(mid_write, 10) << "kills mid-write: " << mid_write;
  std::printf("%d of %d kills landed mid-write\n", mid_write, kKills);
}

}  // namespace
}  // namespace ps
