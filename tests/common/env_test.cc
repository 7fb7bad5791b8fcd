#include "common/env.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "testing/crash_test.h"
#include "testing/temp_dir.h"

namespace pillar {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

absl::StatusOr<std::string> ReadIfThere(const fs::path& path) {
  if (!fs::is_regular_file(path)) return absl::NotFoundError(path.string() + " is missing");
  return Slurp(path);
}

TEST(PublishAtomicallyTest, ACrashAtAnyStepLeavesTheOldFileOrTheNewOne) {
  const std::string old_text(10'000, 'o'), new_text(20'000, 'n');
  testing::CrashOutcomes outcomes = testing::ExpectOldOrNewAfterACrashAtEveryStep({
      .prepare = [&](const fs::path& dir) { std::ofstream(dir / "ports") << old_text; },
      .write =
          [&](Env& env, const fs::path& dir) {
            return PublishAtomically(env, (dir / "ports").string(), new_text, 0644);
          },
      .read = [](const fs::path& dir) { return ReadIfThere(dir / "ports"); },
      .old_state = old_text,
      .new_state = new_text,
  });
  EXPECT_GT(outcomes.old_seen, 0);
}

TEST(PublishAtomicallyTest, AFirstPublishLeavesNothingOrTheWholeFile) {
  // With no old file, "nothing" is the old state: a reader must never find a part of one.
  testing::CrashOutcomes outcomes = testing::ExpectOldOrNewAfterACrashAtEveryStep({
      .prepare = [](const fs::path&) {},
      .write =
          [](Env& env, const fs::path& dir) {
            return PublishAtomically(env, (dir / "metrics.prom").string(), "up 1\n", 0644);
          },
      .read = [](const fs::path& dir) -> absl::StatusOr<std::string> {
        if (!fs::exists(dir / "metrics.prom")) return std::string("(none)");
        return Slurp(dir / "metrics.prom");
      },
      .old_state = "(none)",
      .new_state = "up 1\n",
  });
  EXPECT_GT(outcomes.old_seen, 0);
}

// The names in `dir`, sorted.
std::vector<std::string> Names(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(EnvTest, ANewFileIsNeverWrittenThroughALinkOrAFifoAtItsName) {
  testing::TempDir dir;
  const fs::path victim = dir.path() / "state.db";
  std::ofstream(victim) << "precious";
  Env& env = *Env::Default();
  for (const char* kind : {"symlink", "hard link", "fifo"}) {
    SCOPED_TRACE(kind);
    const fs::path name = dir.path() / "shard.tmp";
    if (std::string(kind) == "symlink") fs::create_symlink(victim, name);
    if (std::string(kind) == "hard link") fs::create_hard_link(victim, name);
    if (std::string(kind) == "fifo") {
      ASSERT_EQ(::mkfifo(name.c_str(), 0600), 0);
    }
    absl::StatusOr<std::unique_ptr<WritableFile>> file = env.NewWritableFile(name, 0600);
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_TRUE((*file)->Append(std::as_bytes(std::span("new", 3))).ok());
    ASSERT_TRUE((*file)->Close().ok());
    EXPECT_EQ(Slurp(victim), "precious");
    EXPECT_EQ(Slurp(name), "new");
    fs::remove(name);
  }
}

// Found by review helper-121: `pillar ckpt import --file FIFO` waited forever in MapFile's open.
TEST(EnvTest, MappingAFifoOrADirectoryIsRefusedAtOnce) {
  testing::TempDir dir;
  const fs::path fifo = dir.path() / "model.pt";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<MappedFile>> mapped = Env::Default()->MapFile(fifo);
  EXPECT_EQ(mapped.status().code(), absl::StatusCode::kInvalidArgument) << mapped.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_FALSE(Env::Default()->MapFile(dir.path()).ok());
}

TEST(EnvTest, AFileLockIsHeldByOneHolderAtATimeAndNeverThroughALink) {
  testing::TempDir dir;
  Env& env = *Env::Default();
  const std::string path = (dir.path() / ".lock").string();
  absl::StatusOr<std::unique_ptr<FileLock>> first = env.LockFile(path);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(env.LockFile(path).status().code(), absl::StatusCode::kFailedPrecondition);
  first->reset();
  EXPECT_TRUE(env.LockFile(path).ok());
  const fs::path victim = dir.path() / "victim";
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, dir.path() / "linked.lock");
  EXPECT_FALSE(env.LockFile((dir.path() / "linked.lock").string()).ok());
  EXPECT_EQ(Slurp(victim), "precious");
}

TEST(PublishAtomicallyTest, LeavesNothingButTheFileAndNeverUsesAPlantedTempName) {
  testing::TempDir dir;
  const fs::path victim = dir.path() / "state.db";
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, dir.path() / "out.tmp");
  ASSERT_TRUE(PublishAtomically(*Env::Default(), (dir.path() / "out").string(), "new", 0600).ok());
  EXPECT_EQ(Slurp(victim), "precious");
  EXPECT_EQ(Slurp(dir.path() / "out"), "new");
  EXPECT_EQ(Names(dir.path()), (std::vector<std::string>{"out", "out.tmp", "state.db"}));
}

// The fourth review's finding: two processes publishing one file (two health checks writing
// one textfile) shared the temp name, so one removed the other's half-written file and then
// renamed the other's into place, or failed.
TEST(PublishAtomicallyTest, ConcurrentPublishersEachPublishAWholeFile) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "node.prom").string();
  const std::string a(64 * 1024, 'a'), b(64 * 1024, 'b');
  std::atomic<int> failures{0};
  auto publish = [&](const std::string& text) {
    for (int i = 0; i < 50; ++i) {
      if (!PublishAtomically(*Env::Default(), path, text, 0644).ok()) ++failures;
      const std::string seen = Slurp(path);
      if (seen != a && seen != b) ++failures;  // a torn or empty file
    }
  };
  std::thread first(publish, a), second(publish, b);
  first.join();
  second.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(Names(dir.path()), (std::vector<std::string>{"node.prom"}));
}

TEST(PublishAtomicallyTest, ReplacesALinkAtTheTargetRatherThanItsTarget) {
  testing::TempDir dir;
  const fs::path victim = dir.path() / "state.db";
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, dir.path() / "out");
  ASSERT_TRUE(PublishAtomically(*Env::Default(), (dir.path() / "out").string(), "new", 0600).ok());
  EXPECT_EQ(Slurp(victim), "precious");
  EXPECT_FALSE(fs::is_symlink(dir.path() / "out"));
  EXPECT_EQ(Slurp(dir.path() / "out"), "new");
}

// The fifth review's finding: a write that failed (a full disk) left its temporary file behind,
// so a job retrying on a full disk piled them up.
TEST(PublishAtomicallyTest, AFailedWriteLeavesNoTemporaryFile) {
  for (testing::FaultEnv::Fault fault :
       {testing::FaultEnv::Fault::kError, testing::FaultEnv::Fault::kShortWrite,
        testing::FaultEnv::Fault::kNoSpace}) {
    // create, append, sync, close, rename: a failure at any of them, before the rename is done.
    for (int64_t at = 1; at <= 5; ++at) {
      testing::TempDir dir;
      std::ofstream(dir.path() / "node.prom") << "old";
      testing::FaultEnv env;
      env.FailAt(at, fault);
      EXPECT_FALSE(PublishAtomically(env, (dir.path() / "node.prom").string(), "new", 0644).ok());
      EXPECT_EQ(Names(dir.path()), (std::vector<std::string>{"node.prom"}))
          << "fault " << int(fault) << " at step " << at;
      EXPECT_EQ(Slurp(dir.path() / "node.prom"), "old");
    }
  }
}

TEST(PublishAtomicallyTest, TheModeIsTheOneAskedForWhateverTheUmask) {
  testing::TempDir dir;
  const mode_t old_umask = ::umask(0077);
  ASSERT_TRUE(
      PublishAtomically(*Env::Default(), (dir.path() / "metrics").string(), "x", 0644).ok());
  ::umask(0);
  ASSERT_TRUE(PublishAtomically(*Env::Default(), (dir.path() / "secret").string(), "x", 0600).ok());
  ::umask(old_umask);
  struct stat st {};
  ASSERT_EQ(::stat((dir.path() / "metrics").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  ASSERT_EQ(::stat((dir.path() / "secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(PublishAtomicallyTest, AMissingDirectoryIsAnErrorNamingThePath) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "missing" / "out").string();
  absl::Status s = PublishAtomically(*Env::Default(), path, "x", 0600);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
}

}  // namespace
}  // namespace pillar
