#include "common/storage/checkpoint.h"

#include <filesystem>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/scratch_dir.h"

namespace ps {
namespace {

// Each test's checkpoint folders live in its own scratch folder, removed however it ends.
class CheckpointDirTest : public ScratchDirTest {};

TEST(ByteCodec, RoundTripsEveryType) {
  ByteWriter w;
  w.U8(7);
  w.U32(0xdeadbeef);
  w.U64(0x0123456789abcdefULL);
  w.I64(-5);
  const std::vector<float> f = {1.5f, -2.0f, 3.25f};
  w.Floats(f);
  const std::vector<int64_t> i = {4, -9};
  w.I64s(i);
  const std::vector<uint16_t> u = {0, 65535, 258};
  w.U16s(u);
  ByteReader r(w.bytes());
  EXPECT_EQ(*r.U8("a"), 7);
  EXPECT_EQ(*r.U32("b"), 0xdeadbeefu);
  EXPECT_EQ(*r.U64("c"), 0x0123456789abcdefULL);
  EXPECT_EQ(*r.I64("d"), -5);
  EXPECT_EQ(*r.Floats("e", 10), f);
  EXPECT_EQ(*r.I64s("f", 10), i);
  EXPECT_EQ(*r.U16s("g", 10), u);
  EXPECT_EQ(r.remaining(), 0u);
  EXPECT_EQ(r.U8("past the end").status().code(), absl::StatusCode::kDataLoss);
}

TEST(ByteCodec, RefusesLengthsBeyondTheBoundOrThePayload) {
  ByteWriter w;
  w.Floats(std::vector<float>(4, 1.0f));
  ByteReader bounded(w.bytes());
  EXPECT_EQ(bounded.Floats("values", 3).status().code(), absl::StatusCode::kDataLoss);
  ByteWriter lying;
  lying.U64(1000);  // claims 1000 floats, holds none
  ByteReader r(lying.bytes());
  EXPECT_EQ(r.Floats("values", 1 << 20).status().code(), absl::StatusCode::kDataLoss);
}

TEST(CheckpointFrame, RoundTripsAndDetectsEveryKindOfDamage) {
  const std::string payload = "the shard's state";
  const std::string framed = FrameCheckpoint(payload);
  ASSERT_EQ(*UnframeCheckpoint(framed), payload);
  // Any truncation is detected.
  for (size_t n = 0; n < framed.size(); ++n) {
    EXPECT_EQ(UnframeCheckpoint(framed.substr(0, n)).status().code(), absl::StatusCode::kDataLoss)
        << n;
  }
  // Any single flipped byte is detected.
  for (size_t at = 0; at < framed.size(); ++at) {
    std::string bad = framed;
    bad[at] ^= 0x10;
    EXPECT_EQ(UnframeCheckpoint(bad).status().code(), absl::StatusCode::kDataLoss) << at;
  }
}

TEST_F(CheckpointDirTest, KeepsTheNewestAndLoadsTheNewest) {
  auto d = CheckpointDir::Open(dir_, 2);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->LoadNewest().status().code(), absl::StatusCode::kNotFound);
  for (uint64_t v : {5, 10, 15}) ASSERT_TRUE(d->Write(v, "state " + std::to_string(v)).ok());
  const std::vector<CheckpointInfo> all = d->List();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].sequence, 10u);
  EXPECT_EQ(all[1].sequence, 15u);
  auto loaded = d->LoadNewest();
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->payload, "state 15");
  EXPECT_EQ(loaded->info.sequence, 15u);
}

TEST_F(CheckpointDirTest, SkipsACorruptNewestCheckpointAndLoadsTheOneBefore) {
  auto d = CheckpointDir::Open(dir_, 3);
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(d->Write(1, "older").ok());
  auto newest = d->Write(2, "newer");
  ASSERT_TRUE(newest.ok());
  std::string bytes = Read(newest->path);
  bytes[bytes.size() / 2] ^= 0x01;
  WriteFile(newest->path, bytes);
  std::vector<std::string> skipped;
  auto loaded = d->LoadNewest(&skipped);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->payload, "older");
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("checksum mismatch"), std::string::npos) << skipped[0];
  // The corrupt file is set aside: no longer listed, kept for inspection.
  EXPECT_FALSE(std::filesystem::exists(newest->path));
  EXPECT_TRUE(std::filesystem::exists(newest->path + ".corrupt"));
  ASSERT_EQ(d->List().size(), 1u);
  // A torn file (cut short) is skipped the same way.
  auto torn = d->Write(3, "newest");
  ASSERT_TRUE(torn.ok());
  WriteFile(torn->path, Read(torn->path).substr(0, 10));
  skipped.clear();
  EXPECT_EQ(d->LoadNewest(&skipped)->payload, "older");
  EXPECT_EQ(skipped.size(), 1u);
}

TEST_F(CheckpointDirTest, KeepsTheBaseOfAnIncrementalCheckpointAndSkipsRefusedOnes) {
  auto d = CheckpointDir::Open(dir_, 2);
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(d->Write(10, "full 10").ok());
  for (uint64_t v : {11, 12, 13}) ASSERT_TRUE(d->Write(v, "delta", /*base=*/10).ok());
  std::vector<uint64_t> kept;
  for (const CheckpointInfo& c : d->List()) kept.push_back(c.sequence);
  EXPECT_EQ(kept, (std::vector<uint64_t>{10, 12, 13}));  // the newest 2, and their base
  EXPECT_EQ(*d->Load(10), "full 10");
  EXPECT_EQ(d->Load(11).status().code(), absl::StatusCode::kNotFound);
  // An acceptor's DATA_LOSS or NOT_FOUND passes over a checkpoint; another code is returned.
  std::vector<std::string> skipped;
  auto loaded = d->LoadNewest(&skipped, [](const CheckpointDir::Loaded& c) {
    return c.info.sequence == 10 ? absl::OkStatus() : absl::NotFoundError("no base");
  });
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->info.sequence, 10u);
  EXPECT_EQ(skipped.size(), 2u);
  // Not renamed; the name says the base.
  EXPECT_TRUE(
      std::filesystem::exists(dir_ + "/ckpt-00000000000000000013.on-00000000000000000010.ps"));
  EXPECT_EQ(d->LoadNewest(nullptr,
                          [](const CheckpointDir::Loaded&) {
                            return absl::FailedPreconditionError("another shard");
                          })
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(CheckpointDirTest, KeepsTheBasesOfEveryKeptIncrementalCheckpoint) {
  auto d = CheckpointDir::Open(dir_, 2);
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(d->Write(10, "full 10").ok());
  ASSERT_TRUE(d->Write(11, "delta 11", /*base=*/10).ok());
  ASSERT_TRUE(d->Write(12, "delta 12", /*base=*/10).ok());
  ASSERT_TRUE(d->Write(20, "full 20").ok());
  // The newest 2 are 12 and 20; 12 still needs 10, which stays: an older incremental checkpoint
  // kept as a fallback can be restored.
  std::vector<std::pair<uint64_t, std::optional<uint64_t>>> kept;
  for (const CheckpointInfo& c : d->List()) kept.emplace_back(c.sequence, c.base);
  EXPECT_EQ(kept, (std::vector<std::pair<uint64_t, std::optional<uint64_t>>>{
                      {10, std::nullopt}, {12, 10}, {20, std::nullopt}}));
  EXPECT_TRUE(d->CheckRestorable(12).ok());
  EXPECT_TRUE(d->CheckRestorable(20).ok());
  EXPECT_EQ(d->CheckRestorable(11).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(d->Write(21, "delta 21", /*base=*/20).ok());  // 10 and 12 go now
  kept.clear();
  for (const CheckpointInfo& c : d->List()) kept.emplace_back(c.sequence, c.base);
  EXPECT_EQ(kept, (std::vector<std::pair<uint64_t, std::optional<uint64_t>>>{{20, std::nullopt},
                                                                             {21, 20}}));
  // Writing a number again replaces its file, whatever its base was.
  ASSERT_TRUE(d->Write(21, "full 21").ok());
  ASSERT_EQ(d->List().size(), 2u);
  EXPECT_FALSE(d->Find(21)->base.has_value());
  EXPECT_EQ(*d->Load(21), "full 21");
}

TEST_F(CheckpointDirTest, ChecksARestorableCheckpointAndItsBaseWithoutRenamingThem) {
  auto d = CheckpointDir::Open(dir_, 3);
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(d->Write(10, "full 10").ok());
  auto delta = d->Write(11, "delta 11", /*base=*/10);
  ASSERT_TRUE(delta.ok());
  EXPECT_TRUE(d->CheckRestorable(11).ok());
  EXPECT_EQ(d->CheckRestorable(12).code(), absl::StatusCode::kNotFound);
  std::string bytes = Read(d->Find(10)->path);
  bytes[bytes.size() / 2] ^= 0x01;
  WriteFile(d->Find(10)->path, bytes);
  // The increment is intact, its base is not.
  EXPECT_EQ(d->CheckRestorable(11).code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(d->Find(10).has_value());
}

TEST_F(CheckpointDirTest, RemovesTheCheckpointsNewerThanTheOneTheRunWentBackTo) {
  auto d = CheckpointDir::Open(dir_, 5);
  ASSERT_TRUE(d.ok());
  for (uint64_t v : {5, 10, 15, 20}) ASSERT_TRUE(d->Write(v, absl::StrCat("state ", v)).ok());
  auto removed = d->RemoveNewerThan(10);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, (std::vector<std::string>{d->dir() + "/ckpt-00000000000000000015.ps",
                                                d->dir() + "/ckpt-00000000000000000020.ps"}));
  std::vector<uint64_t> left;
  for (const CheckpointInfo& c : d->List()) left.push_back(c.sequence);
  EXPECT_EQ(left, (std::vector<uint64_t>{5, 10}));
  EXPECT_EQ(d->LoadNewest()->payload, "state 10");
  EXPECT_TRUE(d->RemoveNewerThan(10)->empty());
}

TEST_F(CheckpointDirTest, FindsTheNewestCheckpointEveryFolderCanRestore) {
  std::vector<CheckpointDir> dirs;
  for (int shard = 0; shard < 3; ++shard) {
    auto d = CheckpointDir::Open(absl::StrCat(dir_, "/ps-", shard), 5);
    ASSERT_TRUE(d.ok());
    dirs.push_back(*std::move(d));
  }
  EXPECT_EQ(NewestCommonRestorable(dirs), std::nullopt);
  EXPECT_EQ(NewestCommonRestorable({}), std::nullopt);
  for (const CheckpointDir& d : dirs) {
    for (uint64_t v : {5, 10}) ASSERT_TRUE(d.Write(v, "state").ok());
  }
  ASSERT_TRUE(dirs[0].Write(15, "state").ok());  // one shard a cut ahead
  ASSERT_TRUE(dirs[2].Write(15, "state").ok());
  EXPECT_EQ(NewestCommonRestorable(dirs), 10u);
  ASSERT_TRUE(dirs[1].Write(15, "delta", /*base=*/10).ok());
  EXPECT_EQ(NewestCommonRestorable(dirs), 15u);
  // A torn checkpoint, or one whose base is torn, is not restorable; by the listing alone it is.
  std::string bytes = Read(dirs[1].Find(10)->path);
  WriteFile(dirs[1].Find(10)->path, bytes.substr(0, bytes.size() - 3));
  EXPECT_EQ(NewestCommonRestorable(dirs), 5u);
  EXPECT_EQ(NewestCommonRestorable(dirs, RestorableCheck::kListed), 15u);
  std::filesystem::remove(dirs[1].Find(10)->path);  // 15's base
  EXPECT_EQ(NewestCommonRestorable(dirs, RestorableCheck::kListed), 5u);
}

TEST_F(CheckpointDirTest, ReadingLeavesACheckpointBeingWrittenAlone) {
  auto d = CheckpointDir::Open(dir_, 3);
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(d->Write(5, "state 5").ok());
  WriteFile(dir_ + "/.tmp-ckpt-00000000000000000010.ps", "a writer's half");
  const CheckpointDir reader = CheckpointDir::ForReading(dir_);
  ASSERT_EQ(reader.List().size(), 1u);
  EXPECT_TRUE(reader.CheckRestorable(5).ok());
  EXPECT_EQ(NewestCommonRestorable({reader}), 5u);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/.tmp-ckpt-00000000000000000010.ps"));
  // A folder that is not there reads as empty, and is not made.
  const CheckpointDir missing = CheckpointDir::ForReading(dir_ + "/none");
  EXPECT_TRUE(missing.List().empty());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/none"));
}

TEST_F(CheckpointDirTest, OpenRemovesLeftoverTemporaryFiles) {
  ASSERT_TRUE(CheckpointDir::Open(dir_, 1).ok());
  WriteFile(dir_ + "/.tmp-ckpt-00000000000000000007.ps", "half a checkpoint");
  auto d = CheckpointDir::Open(dir_, 1);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/.tmp-ckpt-00000000000000000007.ps"));
  EXPECT_TRUE(d->List().empty());
  EXPECT_EQ(CheckpointDir::Open(dir_, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
