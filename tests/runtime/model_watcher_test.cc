// What the model watcher publishes when the store cannot be read: out of descriptors, the scan
// does not say what the store holds, and what is served stays as it is (it once unloaded every
// model); a version whose load failed for such a shortage is loaded again at the next scan, not
// left failed until its files change. And the signature checks while serving: files that could
// not be read for a shortage withdraw nothing (they once withdrew every version).
#include "runtime/model_watcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>

#include "runtime/model_reverifier.h"
#include "signing/model_manifest.h"
#include "signing/signing_key.h"
#include "testing/descriptor_shortage.h"
#include "testing/temp_dir.h"

namespace pillar::runtime {
namespace {

class IdleRunner final : public Runner {
 public:
  void Infer(protocol::InferenceRequest, InferCallback done) override {
    std::move(done)(absl::UnimplementedError("not in this test"));
  }
  bool Ready() const override { return true; }
};

class NoAudit final : public audit::AuditSink {
 public:
  bool Record(const audit::Event& event) override {
    if (event.action == "load" && !event.allowed) ++failed_loads;
    if (event.action == "unload") ++unloads;
    return true;
  }
  int failed_loads = 0;
  int unloads = 0;
};

class ModelWatcherTest : public ::testing::Test {
 protected:
  void AddVersion(const std::string& model, int version) {
    const std::filesystem::path dir = dir_.path() / model / std::to_string(version);
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "model.toml") << "platform = \"simulated\"\n";
  }
  // Version 1 of model "a", with a weights file and a subdirectory, signed with key_.
  std::filesystem::path SignedVersion() {
    AddVersion("a", 1);
    const std::filesystem::path version = dir_.path() / "a" / "1";
    std::filesystem::create_directories(version / "extra");
    std::ofstream(version / "extra" / "vocab.txt") << "a\nb\n";
    std::ofstream(version / "model.pt") << "weights";
    EXPECT_TRUE(signing::SignModel(version.string(), "a/1", key_).ok());
    return version;
  }
  models::ModelRepository Repository() const {
    return models::ModelRepository(dir_.path(), models::VersionPolicy::Latest(), {});
  }
  // Loads every version, or fails as a shortage would while `short_` is set.
  RunnerLoader Loader() {
    return [this](const models::VersionEntry&) -> absl::StatusOr<LoadedVersion> {
      ++loads_;
      if (short_) return absl::ResourceExhaustedError("cannot open model.pt: Too many open files");
      LoadedVersion loaded;
      loaded.runner = std::make_unique<IdleRunner>();
      return loaded;
    };
  }
  static std::vector<std::string> Ready(const ModelWatcher& watcher) {
    std::vector<std::string> names;
    for (const auto& v : const_cast<ModelWatcher&>(watcher).catalog().Current()->versions()) {
      if (v->ready()) names.push_back(v->name);
    }
    return names;
  }

  testing::TempDir dir_;
  const signing::SigningKey key_ = signing::GenerateSigningKey();
  NoAudit audit_;
  std::atomic<int> loads_{0};  // the watcher's thread loads too
  std::atomic<bool> short_{false};
};

TEST_F(ModelWatcherTest, AStoreThatCannotBeListedKeepsWhatIsServed) {
  AddVersion("a", 1);
  AddVersion("b", 1);
  ModelWatcher watcher(Repository(), Loader(), absl::ZeroDuration(), audit_);
  ASSERT_EQ(Ready(watcher), (std::vector<std::string>{"a", "b"}));
  {
    testing::DescriptorShortage shortage;
    models::ScanResult scan = Repository().Scan();
    EXPECT_FALSE(scan.unreadable.ok());
    EXPECT_FALSE(watcher.CheckNow());  // nothing published
  }
  EXPECT_EQ(Ready(watcher), (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(watcher.CheckNow());  // readable again, nothing changed
  EXPECT_EQ(Ready(watcher), (std::vector<std::string>{"a", "b"}));
}

TEST_F(ModelWatcherTest, AMissingStoreIsNotUnreadableAndUnloads) {
  AddVersion("a", 1);
  ModelWatcher watcher(Repository(), Loader(), absl::ZeroDuration(), audit_);
  ASSERT_EQ(Ready(watcher), (std::vector<std::string>{"a"}));
  std::filesystem::remove_all(dir_.path() / "a");
  EXPECT_TRUE(Repository().Scan().unreadable.ok());
  EXPECT_TRUE(watcher.CheckNow());
  EXPECT_TRUE(Ready(watcher).empty());
}

TEST_F(ModelWatcherTest, AVersionThatFailedForAShortageIsLoadedAgainAtTheNextScan) {
  AddVersion("a", 1);
  short_ = true;
  ModelWatcher watcher(Repository(), Loader(), absl::ZeroDuration(), audit_);
  EXPECT_TRUE(Ready(watcher).empty());
  EXPECT_EQ(loads_, 1);
  // Tried again at each scan while the shortage lasts, audited once.
  EXPECT_TRUE(watcher.CheckNow());
  EXPECT_TRUE(watcher.CheckNow());
  EXPECT_EQ(loads_, 3);
  EXPECT_EQ(audit_.failed_loads, 1);
  EXPECT_EQ(audit_.unloads, 0);  // a version that never loaded does not leave service
  short_ = false;
  EXPECT_TRUE(watcher.CheckNow());  // same files, loaded again
  EXPECT_EQ(loads_, 4);
  EXPECT_EQ(Ready(watcher), (std::vector<std::string>{"a"}));
}

TEST_F(ModelWatcherTest, WithoutPollingAShortageIsRetriedFromTheStartUpScan) {
  // poll_ms = 0: the store is read once; a version that failed for a shortage is still loaded
  // again, and what was pushed since is not picked up.
  AddVersion("a", 1);
  short_ = true;
  ModelWatcher watcher(Repository(), Loader(), absl::ZeroDuration(), audit_);
  EXPECT_TRUE(Ready(watcher).empty());
  AddVersion("b", 1);
  EXPECT_TRUE(watcher.RetryFailed());  // failed again: a new registry, the same answer
  EXPECT_EQ(loads_, 2);
  EXPECT_EQ(audit_.failed_loads, 1);
  short_ = false;
  EXPECT_TRUE(watcher.RetryFailed());
  EXPECT_EQ(loads_, 3);
  EXPECT_EQ(Ready(watcher), (std::vector<std::string>{"a"}));
  EXPECT_FALSE(watcher.RetryFailed());  // nothing failed: nothing loaded
  EXPECT_EQ(loads_, 3);
}

TEST_F(ModelWatcherTest, ARetryUnderWayEndsBeforeUnloadAllAndNothingLoadsAfter) {
  // From review helper-136's reading: the thread's retries (every second without polling) went on
  // beside UnloadAll at shutdown: a retry under way published its registry after UnloadAll's.
  // Here the retry is held inside its load while UnloadAll is called.
  AddVersion("a", 1);
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, released = false, fail = true;
  ModelWatcher watcher(
      Repository(),
      [&](const models::VersionEntry&) -> absl::StatusOr<LoadedVersion> {
        std::unique_lock lock(mu);
        if (fail) return absl::ResourceExhaustedError("cannot open model.pt: Too many open files");
        entered = true;
        cv.notify_all();
        cv.wait(lock, [&] { return released; });
        LoadedVersion loaded;
        loaded.runner = std::make_unique<IdleRunner>();
        return loaded;
      },
      absl::ZeroDuration(), audit_);
  EXPECT_TRUE(Ready(watcher).empty());
  {
    std::lock_guard lock(mu);
    fail = false;
  }
  watcher.Start();
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return entered; }));
  }
  std::thread unloader([&] { watcher.UnloadAll(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  {
    std::lock_guard lock(mu);
    released = true;
  }
  cv.notify_all();
  unloader.join();
  EXPECT_TRUE(Ready(watcher).empty());
}

TEST_F(ModelWatcherTest, AVersionThatFailedOtherwiseWaitsForItsFilesToChange) {
  AddVersion("a", 1);
  int loads = 0;
  ModelWatcher watcher(
      Repository(),
      [&](const models::VersionEntry&) -> absl::StatusOr<LoadedVersion> {
        ++loads;
        return absl::InvalidArgumentError("model.toml: bad shape");
      },
      absl::ZeroDuration(), audit_);
  EXPECT_FALSE(watcher.CheckNow());
  EXPECT_EQ(loads, 1);
  EXPECT_FALSE(watcher.RetryFailed());  // without polling, not retried either
  EXPECT_EQ(loads, 1);
}

TEST_F(ModelWatcherTest, SignatureChecksWithdrawNothingForAShortageAndStillCatchAChange) {
  const std::filesystem::path version = SignedVersion();
  ModelWatcher watcher(Repository(), Loader(), absl::ZeroDuration(), audit_);
  ModelReverifier reverifier(watcher.catalog(), {key_.public_key}, absl::Hours(1), absl::Hours(1),
                             audit_);
  ASSERT_EQ(Ready(watcher), (std::vector<std::string>{"a"}));
  EXPECT_EQ(reverifier.CheckChanged(), 0);  // the first look: fingerprints taken
  {
    testing::DescriptorShortage shortage;
    EXPECT_EQ(reverifier.CheckNow(), 0);
    EXPECT_EQ(reverifier.CheckChanged(), 0);
  }
  EXPECT_EQ(Ready(watcher), (std::vector<std::string>{"a"}));
  EXPECT_EQ(reverifier.CheckChanged(), 0);  // the shortage was no change either

  std::ofstream(version / "model.pt") << "other weights";
  EXPECT_EQ(reverifier.CheckChanged(), 1);
  EXPECT_TRUE(Ready(watcher).empty());
}

// A walk of a version's files that fails midway (here: one descriptor left, so the directory
// opens and its subdirectory does not) is no verdict and no crash: the iterator's ++ throws on
// such an error, and the signature checks' thread ended the process with it.
TEST_F(ModelWatcherTest, AWalkThatFailsMidwayEndsNothing) {
  const std::filesystem::path version = SignedVersion();
  ModelWatcher watcher(Repository(), Loader(), absl::ZeroDuration(), audit_);
  ModelReverifier reverifier(watcher.catalog(), {key_.public_key}, absl::Hours(1), absl::Hours(1),
                             audit_);
  EXPECT_EQ(reverifier.CheckChanged(), 0);
  {
    testing::DescriptorShortage shortage(/*spare=*/1);
    EXPECT_EQ(reverifier.CheckChanged(), 0);
  }
  EXPECT_EQ(Ready(watcher), (std::vector<std::string>{"a"}));
}

// A writer of the store who adds thousands of empty directories to a version, with the files
// changed: the check's walk once opened every sibling directory before descending, ran the
// process out of descriptors and took that for "cannot check now", so the change was never
// caught (review helper-56). The walk now holds one descriptor per level: the change withdraws.
TEST_F(ModelWatcherTest, ThousandsOfDirectoriesDoNotHideAChange) {
  const std::filesystem::path version = SignedVersion();
  ModelWatcher watcher(Repository(), Loader(), absl::ZeroDuration(), audit_);
  ModelReverifier reverifier(watcher.catalog(), {key_.public_key}, absl::Hours(1), absl::Hours(1),
                             audit_);
  ASSERT_EQ(Ready(watcher), (std::vector<std::string>{"a"}));
  for (int i = 0; i < 500; ++i) std::filesystem::create_directory(version / std::to_string(i));
  std::ofstream(version / "model.pt") << "other weights";
  testing::DescriptorShortage shortage(/*spare=*/64);  // a process with 64 descriptors to spare
  EXPECT_EQ(reverifier.CheckNow(), 1);
  EXPECT_TRUE(Ready(watcher).empty());
}

}  // namespace
}  // namespace pillar::runtime
