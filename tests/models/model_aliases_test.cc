#include "models/model_aliases.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "absl/time/clock.h"
#include "models/model_repository.h"
#include "testing/crash_test.h"
#include "testing/temp_dir.h"

namespace pillar::models {
namespace {

namespace fs = std::filesystem;

class ModelAliasesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* version : {"1", "2"}) fs::create_directories(store_ / "digits" / version);
    fs::create_directories(store_ / "other" / "1");
    key_ = signing::GenerateSigningKey();
    trust_.trusted = {key_.public_key};
    trust_.require_signature = true;
  }

  // A signed file with prod at `version`, generation `generation`.
  void Write(const std::string& model, int64_t version, int64_t generation,
             const signing::SigningKey* key) {
    ModelAliases aliases;
    aliases.Move("prod", version, "promote", "local:test", 1'700'000'000'000'000);
    aliases.generation = generation;
    ASSERT_TRUE(WriteAliases(store_ / model, model, aliases, key).ok());
  }

  std::string Text(const std::string& model) {
    std::ifstream in(store_ / model / kAliasesFile);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }

  testing::TempDir dir_;
  const fs::path store_ = dir_.path();
  signing::SigningKey key_;
  AliasTrust trust_;
};

// A move reported done survives a power cut, and a crash at any step of one leaves the old
// file or the new one: never a torn file (refused, so every alias of the model stops resolving)
// nor a missing one (a replay of generation 0).
TEST_F(ModelAliasesTest, ACrashAtAnyStepOfAMoveLeavesTheOldAliasesOrTheNew) {
  auto describe = [&](const fs::path& store) -> absl::StatusOr<std::string> {
    absl::StatusOr<ModelAliases> a = ReadAliases(store / "digits", "digits", trust_);
    if (!a.ok()) return a.status();
    return "prod=" + std::to_string(a->targets.at("prod")) + " generation " +
           std::to_string(a->generation);
  };
  auto aliases_at = [](int64_t version, int64_t generation) {
    ModelAliases aliases;
    aliases.Move("prod", version, "promote", "local:test", 1'700'000'000'000'000);
    aliases.generation = generation;
    return aliases;
  };
  testing::CrashOutcomes outcomes = testing::ExpectOldOrNewAfterACrashAtEveryStep({
      .prepare =
          [&](const fs::path& store) {
            fs::create_directories(store / "digits");
            ASSERT_TRUE(WriteAliases(store / "digits", "digits", aliases_at(1, 4), &key_).ok());
          },
      .write =
          [&](Env& env, const fs::path& store) {
            return WriteAliases(store / "digits", "digits", aliases_at(2, 5), &key_, env);
          },
      .read = describe,
      .old_state = "prod=1 generation 4",
      .new_state = "prod=2 generation 5",
  });
  EXPECT_GT(outcomes.old_seen, 0);
}

TEST_F(ModelAliasesTest, ASignedFileReadsBackWithItsGenerationAndSigner) {
  Write("digits", 2, 7, &key_);
  absl::StatusOr<ModelAliases> a = ReadAliases(store_ / "digits", "digits", trust_);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->targets.at("prod"), 2);
  EXPECT_EQ(a->generation, 7);
  EXPECT_EQ(a->signed_by, key_.public_key.key_id);
  ASSERT_EQ(a->history.size(), 1u);
  EXPECT_EQ(a->history[0].by, "local:test");
}

// The finding: anyone who could write the store could point an alias at any signed version.
TEST_F(ModelAliasesTest, AnUnsignedOrForgedFileIsRefusedWhereSignaturesAreRequired) {
  Write("digits", 2, 1, nullptr);  // unsigned
  absl::StatusOr<ModelAliases> a = ReadAliases(store_ / "digits", "digits", trust_);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kPermissionDenied) << a.status();
  EXPECT_NE(a.status().message().find("not signed"), std::string::npos) << a.status();
  trust_.require_signature = false;
  EXPECT_TRUE(ReadAliases(store_ / "digits", "digits", trust_).ok());
  trust_.require_signature = true;

  signing::SigningKey stranger = signing::GenerateSigningKey();
  Write("digits", 2, 9, &stranger);
  a = ReadAliases(store_ / "digits", "digits", trust_);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kPermissionDenied) << a.status();

  // An edited payload no longer matches its signature.
  Write("digits", 1, 3, &key_);
  std::string text = Text("digits");
  const size_t at = text.find("\"payload\":\"") + 30;
  text[at] = text[at] == 'A' ? 'B' : 'A';
  std::ofstream(store_ / "digits" / kAliasesFile) << text;
  EXPECT_FALSE(ReadAliases(store_ / "digits", "digits", trust_).ok());
}

TEST_F(ModelAliasesTest, AFileSignedForAnotherModelIsRefused) {
  Write("other", 1, 4, &key_);
  fs::copy_file(store_ / "other" / kAliasesFile, store_ / "digits" / kAliasesFile);
  absl::StatusOr<ModelAliases> a = ReadAliases(store_ / "digits", "digits", trust_);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kPermissionDenied) << a.status();
  EXPECT_NE(a.status().message().find("signed for model 'other'"), std::string::npos) << a.status();
}

// The finding: rolling back by putting an older signed file back. The generation each file
// carries goes through admit_generation, which remembers the highest seen.
TEST_F(ModelAliasesTest, EveryGenerationIsAdmittedOrRefusedByTheCaller) {
  int64_t highest = 0;
  trust_.admit_generation = [&](std::string_view model, int64_t generation) -> absl::Status {
    EXPECT_EQ(model, "digits");
    if (generation < highest) return absl::PermissionDeniedError("older than seen");
    highest = generation;
    return absl::OkStatus();
  };
  Write("digits", 2, 1, &key_);
  const std::string first = Text("digits");
  ASSERT_TRUE(ReadAliases(store_ / "digits", "digits", trust_).ok());
  Write("digits", 1, 2, &key_);
  ASSERT_TRUE(ReadAliases(store_ / "digits", "digits", trust_).ok());
  EXPECT_EQ(highest, 2);
  std::ofstream(store_ / "digits" / kAliasesFile) << first;  // put back
  absl::StatusOr<ModelAliases> a = ReadAliases(store_ / "digits", "digits", trust_);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kPermissionDenied) << a.status();
  // Removed: generation 0, also below what was seen.
  fs::remove(store_ / "digits" / kAliasesFile);
  EXPECT_FALSE(ReadAliases(store_ / "digits", "digits", trust_).ok());
}

TEST_F(ModelAliasesTest, ASignedFileWithoutAGenerationIsMalformed) {
  Write("digits", 2, 0, &key_);
  EXPECT_EQ(ReadAliases(store_ / "digits", "digits", trust_).status().code(),
            absl::StatusCode::kDataLoss);
}

// A refused file does not take the model's routes away: the scan keeps the aliases in service
// and reports why.
TEST_F(ModelAliasesTest, TheScanKeepsTheAliasesInServiceWhenTheFileIsRefused) {
  ModelRepository repo(store_, VersionPolicy::Latest(), {}, trust_);
  Write("digits", 1, 1, &key_);
  ScanResult first = repo.Scan();
  ASSERT_EQ(first.aliases.at("digits").at("prod"), 1);
  Write("digits", 2, 2, nullptr);  // a forged move to version 2
  ScanResult second = repo.Scan(&first.aliases);
  EXPECT_EQ(second.aliases.at("digits").at("prod"), 1);
  bool reported = false;
  for (const auto& [model, status] : second.model_errors) {
    reported |= model == "digits" && status.code() == absl::StatusCode::kPermissionDenied;
  }
  EXPECT_TRUE(reported);
  // Without aliases in service there is nothing to keep: the model has no alias.
  ScanResult fresh = repo.Scan();
  EXPECT_FALSE(fresh.aliases.contains("digits"));
}

// A .lock link planted by a writer of the store would make the operator's CLI create files
// wherever it points.
TEST_F(ModelAliasesTest, TheModelLockIsNeverTakenThroughALink) {
  const fs::path target = dir_.path() / "created-by-operator";
  fs::create_symlink(target, store_ / "digits" / ".lock");
  EXPECT_FALSE(ModelLock::Acquire(store_ / "digits").ok());
  EXPECT_FALSE(fs::exists(target));
  EXPECT_TRUE(ModelLock::Acquire(store_ / "other").ok());
}

// Whoever can write the store can hold the lock for ever: a command waits a bounded time.
TEST_F(ModelAliasesTest, AHeldModelLockIsWaitedForABoundedTime) {
  absl::StatusOr<ModelLock> first = ModelLock::Acquire(store_ / "digits");
  ASSERT_TRUE(first.ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<ModelLock> second = ModelLock::Acquire(store_ / "digits", absl::Milliseconds(200));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// A FIFO (or a link, or a hard link to a file that matters) left at the old temp name: the
// write neither waits on it nor writes through it (its temp name is now random, so nothing left
// at a name is ever opened).
TEST_F(ModelAliasesTest, WhateverSitsAtTheTempNameIsReplacedNotOpened) {
  const fs::path tmp = store_ / "digits" / "aliases.json.tmp";
  ASSERT_EQ(::mkfifo(tmp.c_str(), 0644), 0);
  Write("digits", 1, 1, &key_);  // returns: the FIFO was not opened
  EXPECT_TRUE(ReadAliases(store_ / "digits", "digits", trust_).ok());
  fs::remove(tmp);
  const fs::path precious = dir_.path() / "precious";
  std::ofstream(precious) << "keep me";
  fs::create_hard_link(precious, tmp);
  Write("digits", 1, 2, &key_);
  EXPECT_EQ(Text("digits").empty(), false);
  std::ifstream in(precious);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), {}), "keep me");
}

}  // namespace
}  // namespace pillar::models
