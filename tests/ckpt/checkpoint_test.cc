// The checkpoint library's commit protocol and readers on real files: round trips, every kind
// of damage named, LoadLatest walking back past what is broken, retention, and a fault injected
// at every single step of a save (each kind of fault, and a crash) never leaving a checkpoint
// that loads but is not the one saved.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <numeric>
#include <optional>

#include "absl/time/clock.h"
#include "ckpt/checkpoint_format.h"
#include "ckpt/checkpoint_io.h"
#include "ckpt/run_directory.h"
#include "testing/fault_env.h"
#include "testing/temp_dir.h"

namespace pillar::ckpt {
namespace {

namespace fs = std::filesystem;
using ::pillar::testing::FaultEnv;

// A step's worth of state: two float tensors, an int64 tensor, a blob and an empty tensor.
struct State {
  std::vector<float> weights, bias;
  std::vector<int64_t> counters;
  std::string optimizer;
  explicit State(int seed) : weights(3000), bias(10), counters(5) {
    for (size_t i = 0; i < weights.size(); ++i) weights[i] = float(seed) * 0.5f + float(i);
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = -float(seed) - float(i);
    std::iota(counters.begin(), counters.end(), seed);
    optimizer = "momentum state of step " + std::to_string(seed);
  }
  std::vector<EntryView> Entries() const {
    return {{"fc.weight", DType::kFloat32, {300, 10}, std::as_bytes(std::span(weights))},
            {"fc.bias", DType::kFloat32, {10}, std::as_bytes(std::span(bias))},
            {"counters", DType::kInt64, {5}, std::as_bytes(std::span(counters))},
            {"optimizer", DType::kBlob, {}, std::as_bytes(std::span(optimizer))},
            {"empty", DType::kFloat32, {0, 4}, {}}};
  }
  bool Matches(const LoadedCheckpoint& c) const {
    for (const EntryView& e : Entries()) {
      std::span<const std::byte> got = c.Data(e.name);
      if (c.Find(e.name) == nullptr || got.size() != e.data.size() ||
          (!got.empty() && std::memcmp(got.data(), e.data.data(), got.size()) != 0)) {
        return false;
      }
    }
    return true;
  }
};

std::string StepPath(const std::string& root, int step) { return root + "/" + StepDirName(step); }

// Writes State(step) at each of `steps` (publishing each as latest when asked).
[[nodiscard]] bool WriteSteps(RunDirectory& run, std::initializer_list<int> steps,
                              bool publish = false) {
  for (int step : steps) {
    State state(step);
    if (!WriteCheckpoint(*Env::Default(), run.StepPath(step), step, state.Entries(), {}, {}).ok() ||
        (publish && !run.PublishLatest(step).ok())) {
      return false;
    }
  }
  return true;
}

// Flips byte 5 of a step's first shard: damage no reader may pass.
void DamageShard(const std::string& step_dir) {
  std::fstream f(step_dir + "/shard-00000.bin", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(5);
  f.put('\x7f');
}

WriteOptions SmallShards() {
  WriteOptions o;
  o.shard_bytes = 8000;  // the weights alone, then the rest: two shards
  o.threads = 2;
  return o;
}

TEST(CheckpointTest, ARoundTripKeepsEveryEntryAndTheManifestSaysWhatIsWhere) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "step-00000007").string();
  State state(7);
  auto written =
      WriteCheckpoint(*Env::Default(), path, 7, state.Entries(), {{"seed", "42"}}, SmallShards());
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->shards.size(), 2u);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  auto loaded = LoadCheckpoint(*Env::Default(), path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(state.Matches(*loaded));
  EXPECT_EQ(loaded->manifest().step, 7);
  EXPECT_EQ(loaded->manifest().metadata.at("seed"), "42");
  const EntryInfo* w = loaded->Find("fc.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{300, 10}));
  EXPECT_EQ(w->dtype, DType::kFloat32);
  for (const EntryInfo& e : loaded->manifest().entries) {
    EXPECT_EQ(e.offset % format::kEntryAlignment, 0u) << e.name;
  }
  EXPECT_TRUE(VerifyCheckpoint(*Env::Default(), path, loaded->manifest()).ok());
  // A second save to the same name is refused: a checkpoint is immutable.
  EXPECT_EQ(WriteCheckpoint(*Env::Default(), path, 7, state.Entries(), {}, {}).status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(CheckpointTest, ShapesThatDoNotMatchTheDataAreRefusedBeforeWriting) {
  testing::TempDir dir;
  std::vector<float> data(10);
  std::vector<EntryView> entries = {{"x", DType::kFloat32, {3, 3}, std::as_bytes(std::span(data))}};
  auto written = WriteCheckpoint(*Env::Default(), (dir.path() / "c").string(), 1, entries, {}, {});
  EXPECT_EQ(written.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(dir.path() / "c"));
}

// Whatever a load would refuse is refused before writing: a checkpoint that saves but never
// loads would lose the run it was meant to protect.
TEST(CheckpointTest, WhatALoadWouldRefuseIsNeverWritten) {
  testing::TempDir dir;
  std::vector<float> four(4);
  const auto bytes = std::as_bytes(std::span(four));
  const std::string with_nul("a\0b", 3);
  const std::vector<std::pair<std::vector<EntryView>, std::string>> cases = {
      {{{"x", DType::kFloat32, {4}, bytes}, {"x", DType::kFloat32, {4}, bytes}}, "given twice"},
      {{{with_nul, DType::kFloat32, {4}, bytes}}, "no NUL"},
      {{{"x", DType::kFloat32, std::vector<int64_t>(17, 1), {}}}, "more than 16 dimensions"},
      {{{"x", DType::kFloat32, {-4, -1}, bytes}}, "a negative one"},
      {{{"x", DType::kFloat32, {int64_t(1) << 40, int64_t(1) << 40}, bytes}}, "too many elements"},
  };
  for (const auto& [entries, why] : cases) {
    auto written =
        WriteCheckpoint(*Env::Default(), (dir.path() / "c").string(), 1, entries, {}, {});
    EXPECT_EQ(written.status().code(), absl::StatusCode::kInvalidArgument) << why;
    EXPECT_NE(written.status().message().find(why), std::string::npos) << written.status();
    EXPECT_FALSE(fs::exists(dir.path() / "c"));
    EXPECT_FALSE(fs::exists(dir.path() / "c.tmp"));
  }
  auto written = WriteCheckpoint(*Env::Default(), (dir.path() / "c").string(), 1,
                                 {{{"x", DType::kFloat32, {4}, bytes}}}, {{"", "v"}}, {});
  EXPECT_NE(written.status().message().find("metadata keys"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir.path() / "c"));
}

// Damage of every kind is found, and the message names the file and, where it can, the entry.
TEST(CheckpointTest, DamageIsNamedPrecisely) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "step-00000001").string();
  State state(1);
  ASSERT_TRUE(WriteCheckpoint(*Env::Default(), path, 1, state.Entries(), {}, SmallShards()).ok());
  const std::string shard0 = path + "/shard-00000.bin";
  const std::string manifest = path + "/MANIFEST";
  auto read = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  auto write = [](const std::string& p, const std::string& bytes) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  };
  const std::string good_shard = read(shard0);
  const std::string good_manifest = read(manifest);
  auto error = [&] {
    return std::string(LoadCheckpoint(*Env::Default(), path).status().message());
  };

  std::string flipped = good_shard;
  flipped[100] ^= 1;
  write(shard0, flipped);
  EXPECT_NE(error().find("shard-00000.bin: entry 'fc.weight' checksum mismatch"), std::string::npos)
      << error();
  // The streaming verifier (pillar ckpt verify) checks the shard's own checksum too.
  auto verified = [&] {
    auto m = ReadManifest(*Env::Default(), path);
    return m.ok() ? VerifyCheckpoint(*Env::Default(), path, *m) : m.status();
  };
  EXPECT_FALSE(verified().ok());
  write(shard0, good_shard.substr(0, good_shard.size() - 1));
  EXPECT_NE(error().find("truncated or torn"), std::string::npos) << error();
  write(shard0, good_shard);
  ASSERT_TRUE(LoadCheckpoint(*Env::Default(), path).ok());
  ASSERT_TRUE(verified().ok());

  // Shard 1 holds fc.bias (40 bytes at 0), then counters at 64: bytes 40-63 are padding, which
  // no entry checksum covers; a load still sees a change there.
  const std::string shard1 = path + "/shard-00001.bin";
  const std::string good_shard1 = read(shard1);
  std::string padded = good_shard1;
  padded[50] = '\x7f';
  write(shard1, padded);
  EXPECT_NE(error().find("shard-00001.bin: byte 50 between entries is not zero"), std::string::npos)
      << error();
  EXPECT_NE(verified().message().find("shard-00001.bin: checksum mismatch"), std::string::npos)
      << verified();
  write(shard1, good_shard1);
  ASSERT_TRUE(LoadCheckpoint(*Env::Default(), path).ok());

  std::string edited = good_manifest;
  edited.replace(edited.find("\"step\":1"), 8, "\"step\":2");
  write(manifest, edited);
  EXPECT_NE(error().find("MANIFEST: checksum mismatch"), std::string::npos) << error();
  write(manifest, good_manifest.substr(0, good_manifest.size() / 2));
  EXPECT_NE(error().find("torn"), std::string::npos) << error();
  fs::remove(manifest);
  EXPECT_NE(error().find("MANIFEST"), std::string::npos) << error();
}

// Found by review helper-121: a manifest (with a valid checksum) whose entries overlap made the
// streaming verifier (`pillar ckpt verify`, a restore's check, draining) hash a length that had
// wrapped around, a crash; with the overlap at the shard's end it skipped the entry and passed.
// Every reader refuses such a checkpoint now, naming the overlap.
TEST(CheckpointTest, EntriesThatOverlapAreRefusedByEveryReader) {
  testing::TempDir dir;
  // a: 256 bytes at 0; b: 64 bytes at 64, inside a; then, in the first shard only, c: 64 bytes
  // at 256.
  for (const bool tail : {true, false}) {
    const std::string path = (dir.path() / (tail ? "step-00000001" : "step-00000002")).string();
    fs::create_directories(path);
    const std::string shard(tail ? 320 : 256, '\x01');
    Manifest m;
    m.step = tail ? 1 : 2;
    m.shards.push_back({"shard-00000.bin", shard.size(), XXH3_64bits(shard.data(), shard.size())});
    auto entry = [&](std::string name, uint64_t offset, uint64_t bytes) {
      m.entries.push_back({std::move(name),
                           DType::kUInt8,
                           {int64_t(bytes)},
                           0,
                           offset,
                           bytes,
                           XXH3_64bits(shard.data() + offset, bytes) ^ (name == "b" ? 1 : 0)});
    };
    entry("a", 0, 256);
    entry("b", 64, 64);  // and its checksum is wrong: nothing may pass it unread
    if (tail) entry("c", 256, 64);
    std::ofstream(path + "/shard-00000.bin", std::ios::binary) << shard;
    std::ofstream(path + "/MANIFEST", std::ios::binary) << m.Encode();
    auto manifest = ReadManifest(*Env::Default(), path);
    ASSERT_TRUE(manifest.ok()) << manifest.status();
    const absl::Status verified = VerifyCheckpoint(*Env::Default(), path, *manifest);
    EXPECT_EQ(verified.code(), absl::StatusCode::kDataLoss) << verified;
    EXPECT_NE(verified.message().find("entries overlap (entry 'b')"), std::string::npos)
        << verified;
    const absl::Status loaded = LoadCheckpoint(*Env::Default(), path).status();
    EXPECT_NE(loaded.message().find("entries overlap (entry 'b')"), std::string::npos) << loaded;
  }
}

TEST(RunDirectoryTest, LoadLatestWalksBackPastWhatIsBrokenAndSaysWhy) {
  testing::TempDir dir;
  RunDirectory run(Env::Default(), (dir.path() / "run").string());
  ASSERT_TRUE(run.Prepare().ok());
  for (int step : {10, 20, 30}) {
    State state(step);
    ASSERT_TRUE(WriteCheckpoint(*Env::Default(), run.StepPath(step), step, state.Entries(), {},
                                SmallShards())
                    .ok());
    ASSERT_TRUE(run.PublishLatest(step).ok());
  }
  // The newest loses a shard byte; a half-written one lies beside it.
  {
    std::fstream f(run.StepPath(30) + "/shard-00001.bin",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3);
    f.put('\x7f');
  }
  fs::create_directories(run.root() + "/step-00000040.tmp");
  std::vector<std::string> skipped;
  auto loaded = run.LoadLatest(&skipped);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->manifest().step, 20);
  EXPECT_TRUE(State(20).Matches(*loaded));
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("step-00000030: "), std::string::npos) << skipped[0];
  EXPECT_NE(skipped[0].find("checksum mismatch"), std::string::npos) << skipped[0];
  // Restart: the stale .tmp goes.
  ASSERT_TRUE(run.Prepare().ok());
  EXPECT_FALSE(fs::exists(run.root() + "/step-00000040.tmp"));
}

// Found by review helper-121: two processes could change one run at once (a restore into a live
// run removed the trainer's save in progress; two trainers wrote one step's files over each
// other's). One process at a time holds the run; a crash holds nothing.
TEST(RunDirectoryTest, OneProcessAtATimeChangesARun) {
  testing::TempDir dir;
  const std::string root = (dir.path() / "run").string();
  std::optional<RunDirectory> first(std::in_place, Env::Default(), root);
  ASSERT_TRUE(first->Prepare().ok());
  RunDirectory second(Env::Default(), root);
  const absl::Status refused = second.Prepare();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_NE(refused.message().find("is in use by another process"), std::string::npos) << refused;
  EXPECT_EQ(second.Prune({}).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.SetAsideNewerThan(0).status().code(), absl::StatusCode::kFailedPrecondition);
  // Readers need no lock.
  EXPECT_TRUE(second.Steps().ok());
  first.reset();
  EXPECT_TRUE(second.Prepare().ok()) << second.Prepare();
}

// Found by review helper-121: Prepare removed every `*.tmp` in the directory it was given, so a
// run path given by mistake (a home directory) lost files of the user's. Only what a crashed
// save leaves goes.
TEST(RunDirectoryTest, PrepareRemovesOnlyWhatACrashedSaveLeft) {
  testing::TempDir dir;
  const fs::path root = dir.path() / "home";
  fs::create_directories(root / "build.tmp" / "sub");
  std::ofstream(root / "build.tmp" / "sub" / "f") << "kept";
  std::ofstream(root / "notes.tmp") << "kept";
  std::ofstream(root / "latest.tmp.xyz") << "kept";
  fs::create_directories(root / "step-00000040.tmp");
  std::ofstream(root / "latest.tmp.0123456789abcdef") << "step-00000040\n";
  RunDirectory run(Env::Default(), root.string());
  ASSERT_TRUE(run.Prepare().ok());
  EXPECT_TRUE(fs::exists(root / "build.tmp" / "sub" / "f"));
  EXPECT_TRUE(fs::exists(root / "notes.tmp"));
  EXPECT_TRUE(fs::exists(root / "latest.tmp.xyz"));
  EXPECT_FALSE(fs::exists(root / "step-00000040.tmp"));
  EXPECT_FALSE(fs::exists(root / "latest.tmp.0123456789abcdef"));
}

// Found by review helper-121: a checkpoint directory holding another step's checkpoint (renamed,
// copied over) was loaded as the step its name says.
TEST(RunDirectoryTest, AManifestOfAnotherStepIsNotTheStepItsDirectoryNames) {
  testing::TempDir dir;
  RunDirectory run(Env::Default(), (dir.path() / "run").string());
  ASSERT_TRUE(run.Prepare().ok());
  ASSERT_TRUE(WriteSteps(run, {100, 200}));
  fs::copy(run.StepPath(100), run.StepPath(300));
  EXPECT_EQ(run.Load(300).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(run.Verify(300).message().find("says step 100, not its directory's"), std::string::npos)
      << run.Verify(300);
  std::vector<std::string> skipped;
  auto loaded = run.LoadLatest(&skipped);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->manifest().step, 200);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("step-00000300: "), std::string::npos) << skipped[0];
}

// Found by review helper-121: a damaged newest checkpoint, and empty directories named like
// steps, counted among the ones kept, and `--keep-last 1` removed every good one.
TEST(RunDirectoryTest, PruningKeepsTheNewestCheckpointThatVerifiesWhateverLiesAboveIt) {
  testing::TempDir dir;
  const std::string root = (dir.path() / "run").string();
  auto damage = [&](int step) { DamageShard(StepPath(root, step)); };
  {
    RunDirectory run(Env::Default(), root);
    ASSERT_TRUE(run.Prepare().ok());
    ASSERT_TRUE(WriteSteps(run, {50, 100, 200, 300}, /*publish=*/true));
  }
  // The newest is damaged, an empty directory lies above it, and one below the newest good one
  // is damaged too (review helper-122): two good ones are kept, the damaged one below goes.
  damage(300);
  damage(100);
  fs::create_directories(root + "/step-99999999");
  {
    RunDirectory run(Env::Default(), root);
    auto removed = run.Prune({.keep_last = 2});
    ASSERT_TRUE(removed.ok()) << removed.status();
    EXPECT_EQ(removed->steps, (std::vector<int64_t>{100}));
    EXPECT_EQ(*run.Steps(), (std::vector<int64_t>{50, 200, 300, 99999999}));
  }
  // With nothing that verifies, nothing is removed.
  damage(200);
  damage(50);
  RunDirectory run(Env::Default(), root);
  EXPECT_EQ(run.Prune({.keep_last = 1}).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(run.Steps()->size(), 4u);
}

TEST(RunDirectoryTest, WhatIsDamagedIsSetAsideNotRemoved) {
  testing::TempDir dir;
  RunDirectory run(Env::Default(), (dir.path() / "run").string());
  ASSERT_TRUE(run.Prepare().ok());
  ASSERT_TRUE(WriteSteps(run, {100, 200, 300, 400}));
  DamageShard(run.StepPath(200));
  fs::remove(run.StepPath(300) + "/MANIFEST");
  // A planted link, even a dangling one, takes no name from the set-aside (review helper-122).
  for (int64_t s = absl::ToUnixSeconds(absl::Now()); s < absl::ToUnixSeconds(absl::Now()) + 3;
       ++s) {
    fs::create_symlink(dir.path() / "nowhere", run.StepPath(200) + ".broken-" + std::to_string(s));
  }
  auto moved = run.SetAsideNewerThan(100);
  ASSERT_TRUE(moved.ok()) << moved.status();
  ASSERT_EQ(moved->size(), 2u);
  EXPECT_EQ(*run.Steps(), (std::vector<int64_t>{100, 400}));  // a good one is not damage
  for (const std::string& aside : *moved) {
    EXPECT_NE(aside.find(".broken-"), std::string::npos) << aside;
    EXPECT_TRUE(fs::is_directory(fs::symlink_status(aside))) << aside;
  }
  // The steps can be written again.
  State again(200);
  EXPECT_TRUE(
      WriteCheckpoint(*Env::Default(), run.StepPath(200), 200, again.Entries(), {}, {}).ok());
}

// A step damaged again at every restart (a failing disk) left a whole copy each time, and
// nothing removed them until the disk was full: retention keeps the newest `keep_set_aside`,
// judged by the names SetAside writes, and leaves every other name alone.
TEST(RunDirectoryTest, RetentionKeepsOnlyTheNewestSetAsideCopies) {
  testing::TempDir dir;
  const std::string root = (dir.path() / "run").string();
  RunDirectory run(Env::Default(), root);
  ASSERT_TRUE(run.Prepare().ok());
  ASSERT_TRUE(WriteSteps(run, {100}));
  for (int s = 1000; s <= 1004; ++s) {
    fs::create_directories(run.StepPath(200) + ".broken-" + std::to_string(s));
  }
  fs::create_directories(run.StepPath(300) + ".broken-1004-1");  // the second that second
  fs::create_symlink(dir.path(), run.StepPath(400) + ".broken-999");
  const std::vector<std::string> not_ours = {"step-00000200.broken-01000",  "step-00000200.broken-",
                                             "step-00000200.broken-1000-0", "step-200.broken-1",
                                             "step-00000200.broken-1000x",  "notes.broken-1"};
  for (const std::string& name : not_ours) fs::create_directories(root + "/" + name);
  EXPECT_FALSE(ParseSetAsideName("step-00000200.broken-+1000").has_value());
  const std::optional<SetAsideName> parsed = ParseSetAsideName("step-00000300.broken-1004-1");
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->step, 300);
  EXPECT_EQ(parsed->unix_seconds, 1004);
  EXPECT_EQ(parsed->n, 1);

  auto pruned = run.Prune({.keep_last = 1, .keep_set_aside = 2});
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_TRUE(pruned->steps.empty());
  EXPECT_EQ(pruned->set_aside,
            (std::vector<std::string>{"step-00000200.broken-1003", "step-00000200.broken-1002",
                                      "step-00000200.broken-1001", "step-00000200.broken-1000",
                                      "step-00000400.broken-999"}));
  EXPECT_TRUE(fs::is_directory(run.StepPath(300) + ".broken-1004-1"));
  EXPECT_TRUE(fs::is_directory(run.StepPath(200) + ".broken-1004"));
  EXPECT_TRUE(fs::is_directory(dir.path())) << "a planted link goes as a link";
  for (const std::string& name : not_ours) EXPECT_TRUE(fs::is_directory(root + "/" + name));

  pruned = run.Prune({.keep_last = 1, .keep_set_aside = 0});
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_EQ(pruned->set_aside.size(), 2u);
  EXPECT_EQ(*run.Steps(), (std::vector<int64_t>{100}));
}

// Found by review helper-127: a set-aside copy that could not be removed (an I/O error on the
// failing disk that damaged it) failed the prune, which stopped the trainer's saves.
TEST(RunDirectoryTest, ASetAsideCopyThatCannotBeRemovedIsSaidAndPruningGoesOn) {
  testing::TempDir dir;
  const std::string root = (dir.path() / "run").string();
  {
    RunDirectory run(Env::Default(), root);
    ASSERT_TRUE(run.Prepare().ok());
    ASSERT_TRUE(WriteSteps(run, {100}));
    for (int s = 1000; s <= 1002; ++s) {
      fs::create_directories(run.StepPath(200) + ".broken-" + std::to_string(s));
    }
  }
  FaultEnv env;
  RunDirectory run(&env, root);
  ASSERT_TRUE(run.Lock().ok());
  env.FailAt(env.ops() + 1, FaultEnv::Fault::kError);  // the first removal, of the copy of 1001
  auto pruned = run.Prune({.keep_last = 1, .keep_set_aside = 1});
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_EQ(pruned->set_aside, (std::vector<std::string>{"step-00000200.broken-1000"}));
  ASSERT_EQ(pruned->not_removed.size(), 1u);
  EXPECT_NE(pruned->not_removed[0].find("step-00000200.broken-1001"), std::string::npos)
      << pruned->not_removed[0];
  EXPECT_TRUE(fs::is_directory(run.StepPath(200) + ".broken-1001"));
}

// Found by review helper-123: a step that could not be read for a reason other than damage was
// skipped like damage (a durable tier unreadable to the trainer: its progress was redone, and
// the step then set aside). It stops the walk now; and a run with no steps but a garbled
// `latest` is an empty run, not one whose checkpoints all failed.
TEST(RunDirectoryTest, AStepThatCannotBeReadStopsTheWalkButAGarbledPointerAloneIsNoRun) {
  testing::TempDir dir;
  {
    RunDirectory empty(Env::Default(), (dir.path() / "empty").string());
    ASSERT_TRUE(empty.Prepare().ok());
    std::ofstream(dir.path() / "empty" / "latest") << "garbage\n";
    std::vector<std::string> skipped;
    EXPECT_TRUE(absl::IsNotFound(empty.LoadLatest(&skipped).status()));
    EXPECT_TRUE(skipped.empty());
  }
  RunDirectory run(Env::Default(), (dir.path() / "run").string());
  ASSERT_TRUE(run.Prepare().ok());
  ASSERT_TRUE(WriteSteps(run, {100, 200}));
  // A link to itself: stat fails with ELOOP, as it would with EACCES or EIO (root reads all).
  fs::remove(run.StepPath(200) + "/MANIFEST");
  fs::create_symlink("MANIFEST", run.StepPath(200) + "/MANIFEST");
  std::vector<std::string> skipped;
  const absl::Status stopped = run.LoadLatest(&skipped).status();
  EXPECT_FALSE(stopped.ok());
  EXPECT_FALSE(IsCheckpointDamage(stopped)) << stopped;
  EXPECT_NE(stopped.message().find("step-00000200 cannot be read"), std::string::npos) << stopped;
  const absl::Status not_moved = run.SetAsideNewerThan(100).status();
  EXPECT_NE(not_moved.message().find("step-00000200 cannot be read"), std::string::npos)
      << not_moved;
  EXPECT_EQ(*run.Steps(), (std::vector<int64_t>{100, 200}));
}

TEST(RunDirectoryTest, RetentionKeepsTheLastNAndEveryKthAndNeverLatest) {
  testing::TempDir dir;
  RunDirectory run(Env::Default(), (dir.path() / "run").string());
  ASSERT_TRUE(run.Prepare().ok());
  State state(0);
  for (int step = 100; step <= 1000; step += 100) {
    ASSERT_TRUE(
        WriteCheckpoint(*Env::Default(), run.StepPath(step), step, state.Entries(), {}, {}).ok());
  }
  ASSERT_TRUE(run.PublishLatest(200).ok());  // an operator pinned an older one
  auto removed = run.Prune({.keep_last = 2, .keep_every = 500});
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*run.Steps(), (std::vector<int64_t>{200, 500, 900, 1000}));
}

// Every step of a save fails in turn, with every kind of fault; then the process "restarts"
// (the crash drops what was not durable). The run must load either the previous checkpoint or
// the new one, complete — never a torn one, never nothing.
TEST(RunDirectoryTest, AFaultAtAnyStepOfASaveLeavesThePreviousOrTheNewCheckpoint) {
  // Count the steps of one save.
  int64_t steps_per_save = 0;
  {
    ::pillar::testing::TempDir dir;
    FaultEnv env;
    RunDirectory run(&env, (dir.path() / "run").string());
    ASSERT_TRUE(run.Prepare().ok());
    const int64_t before = env.ops();
    State state(2);
    ASSERT_TRUE(WriteCheckpoint(env, run.StepPath(2), 2, state.Entries(), {}, SmallShards()).ok());
    ASSERT_TRUE(run.PublishLatest(2).ok());
    steps_per_save = env.ops() - before;
  }
  ASSERT_GT(steps_per_save, 15);
  int new_ones = 0, old_ones = 0;
  for (FaultEnv::Fault fault : {FaultEnv::Fault::kError, FaultEnv::Fault::kShortWrite,
                                FaultEnv::Fault::kNoSpace, FaultEnv::Fault::kStop}) {
    for (int64_t at = 1; at <= steps_per_save; ++at) {
      ::pillar::testing::TempDir dir;
      FaultEnv env;
      std::optional<RunDirectory> crashing(std::in_place, &env, (dir.path() / "run").string());
      RunDirectory& run = *crashing;
      ASSERT_TRUE(run.Prepare().ok());
      State one(1), two(2);
      ASSERT_TRUE(WriteCheckpoint(env, run.StepPath(1), 1, one.Entries(), {}, SmallShards()).ok());
      ASSERT_TRUE(run.PublishLatest(1).ok());
      env.FailAt(env.ops() + at, fault);
      // Single-threaded, so that operation numbers mean the same step every time.
      WriteOptions options = SmallShards();
      options.threads = 1;
      absl::Status saved =
          WriteCheckpoint(env, run.StepPath(2), 2, two.Entries(), {}, options).status();
      if (saved.ok()) saved = run.PublishLatest(2);
      env.Crash();
      const std::string root = run.root();
      crashing.reset();  // the process is gone, and its lock with it
      RunDirectory restarted(Env::Default(), root);
      ASSERT_TRUE(restarted.Prepare().ok());
      std::vector<std::string> skipped;
      auto loaded = restarted.LoadLatest(&skipped);
      ASSERT_TRUE(loaded.ok()) << "fault " << int(fault) << " at " << at << ": " << loaded.status();
      if (loaded->manifest().step == 2) {
        ASSERT_TRUE(two.Matches(*loaded)) << "fault " << int(fault) << " at " << at;
        ++new_ones;
      } else {
        ASSERT_EQ(loaded->manifest().step, 1);
        ASSERT_TRUE(one.Matches(*loaded));
        ASSERT_FALSE(saved.ok() && fault != FaultEnv::Fault::kStop)
            << "a save that reported success was lost, fault at " << at;
        ++old_ones;
      }
    }
  }
  EXPECT_GT(old_ones, 0);
  EXPECT_GT(new_ones, 0);  // faults after the rename became durable leave the new one
}

}  // namespace
}  // namespace pillar::ckpt
