// The audit log end to end on real files: chaining, checkpoints, every kind of tampering,
// torn tails and their repair, several writers, a full queue, a failing store, a lock held by
// someone else, abandoning what is not written, a log cut while it is read, anchors against a
// cut tail, and SIGKILL at random points.
#include "audit/audit_log.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "absl/time/clock.h"
#include "audit/audit_log_format.h"
#include "audit/audit_record.h"
#include "audit/audit_verifier.h"
#include "audit/file_audit_store.h"
#include "gtest/gtest.h"
#include "monitor/metrics.h"
#include "testing/crash_test.h"

namespace pillar::audit {
namespace {

namespace fs = std::filesystem;

// The side file a verifier checks the log against (docs/formats/audit-log.md): replaced whole at
// each checkpoint, so a crash at any step leaves the previous checkpoint or the new one, never a
// torn file (which verify would refuse) nor none (verify would then trust a cut log).
TEST(FileAuditStoreTest, ACrashAtAnyStepOfPublishingACheckpointLeavesTheOldOrTheNew) {
  const std::string old_payload = "{\"checkpoint\":\"old\"}",
                    new_payload = "{\"checkpoint\":\"new\"}";
  auto side_file = [](const fs::path& dir) {
    return (dir / "audit.log").string() + std::string(format::kCheckpointFileSuffix);
  };
  testing::CrashOutcomes outcomes = testing::ExpectOldOrNewAfterACrashAtEveryStep({
      .prepare = [&](const fs::path& dir) { std::ofstream(side_file(dir)) << old_payload << "\n"; },
      .write = [&](Env& env, const fs::path& dir) -> absl::Status {
        auto store = FileAuditStore::Open((dir / "audit.log").string(),
                                          FileAuditStore::kDefaultLockWait, &env);
        if (!store.ok()) return store.status();
        return (*store)->PublishCheckpoint(new_payload);
      },
      .read = [&](const fs::path& dir) -> absl::StatusOr<std::string> {
        std::ifstream in(side_file(dir));
        if (!in) return absl::NotFoundError("no side file");
        std::string line;
        std::getline(in, line);
        std::string rest((std::istreambuf_iterator<char>(in)), {});
        return rest.empty() ? line : line + "|" + rest;
      },
      .old_state = old_payload,
      .new_state = new_payload,
  });
  EXPECT_GT(outcomes.old_seen, 0);
}

class AuditLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pillar_audit_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "audit.log").string();
    key_ = signing::GenerateSigningKey();
  }
  void TearDown() override { fs::remove_all(dir_); }

  AuditLogOptions Options(bool checkpoints = true) {
    AuditLogOptions options;
    options.instance = "test-node";
    if (checkpoints) options.checkpoint_key = key_;
    options.fsync_interval = absl::ZeroDuration();
    return options;
  }

  std::unique_ptr<AuditLog> Open(AuditLogOptions options) {
    auto store = FileAuditStore::Open(path_);
    EXPECT_TRUE(store.ok()) << store.status();
    auto log = AuditLog::Start(std::move(*store), std::move(options));
    EXPECT_TRUE(log.ok()) << log.status();
    return log.ok() ? std::move(*log) : nullptr;
  }

  static void RecordEvents(AuditLog& log, int n, int first = 0) {
    for (int i = first; i < first + n; ++i) {
      const std::string request = "req-" + std::to_string(i);
      EXPECT_TRUE(log.Record({.kind = EventKind::kAuthorization,
                              .allowed = i % 3 != 0,
                              .time_us = 1'800'000'000'000'000 + i,
                              .principal = "key:abc",
                              .tenant = "acme",
                              .action = "infer",
                              .resource = "model:digits/1",
                              .request_id = request,
                              .remote = "127.0.0.1",
                              .explain = [] { return std::string("granted by rule 'users'"); }}));
    }
  }

  // Writes a log of `events` events with a checkpoint at the end (the log is closed).
  void WriteLog(int events) {
    auto log = Open(Options());
    RecordEvents(*log, events);
  }

  VerifyReport Verify(bool with_key = true) {
    return VerifyAuditFile(path_, with_key ? std::vector<signing::PublicKey>{key_.public_key}
                                           : std::vector<signing::PublicKey>{});
  }

  std::vector<std::string> Lines() {
    std::ifstream in(path_);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
  void WriteLines(const std::vector<std::string>& lines) {
    std::ofstream out(path_, std::ios::trunc);
    for (const std::string& line : lines) out << line << '\n';
  }
  std::string Bytes() {
    std::ifstream in(path_, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  void SetBytes(const std::string& bytes) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  // Replaces the log's lines in place (the same file), holding the writers' lock as a writer
  // does: what someone who may write the file, and knows the format, can do under a running
  // server.
  void RewriteUnderLock(const std::vector<std::string>& lines) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX), 0);
    WriteLines(lines);
    ::flock(fd, LOCK_UN);
    ::close(fd);
  }

  fs::path dir_;
  std::string path_;
  signing::SigningKey key_;
};

TEST_F(AuditLogTest, EventsAreChainedAndACheckpointSignsTheHeadAtClose) {
  WriteLog(100);
  const VerifyReport report = Verify();
  ASSERT_TRUE(report.status.ok()) << report.Summary();
  EXPECT_EQ(report.instance, "test-node");
  EXPECT_EQ(report.records, 1 + 100 + 1);  // header, events, final checkpoint
  EXPECT_EQ(report.checkpoints, 1);
  EXPECT_EQ(report.last_checkpoint, 101);
  EXPECT_EQ(report.published, 101);
  const std::vector<std::string> lines = Lines();
  EXPECT_EQ(lines[2].rfind(R"({"seq":2,"type":"event","time":"2027-01-15T08:00:00.000001Z",)", 0),
            0u)
      << lines[2];
  EXPECT_NE(lines[2].find(R"("kind":"authorization","decision":"allow","principal":"key:abc")"),
            std::string::npos);
  EXPECT_NE(lines[2].find(R"("reason":"granted by rule 'users'","request_id":"req-1")"),
            std::string::npos);
}

TEST_F(AuditLogTest, ACheckpointNeedsATrustedKey) {
  WriteLog(3);
  VerifyReport no_key = Verify(false);
  EXPECT_FALSE(no_key.status.ok());
  EXPECT_NE(no_key.status.message().find("no audit public key"), std::string::npos);
  VerifyReport other = VerifyAuditFile(path_, {signing::GenerateSigningKey().public_key});
  EXPECT_NE(other.status.message().find("not trusted"), std::string::npos) << other.Summary();
}

// An event whose every text field is 1 KiB of control characters (each escaped to six bytes)
// is still one record a reader accepts, and a writer can continue after it.
TEST_F(AuditLogTest, AnEventOfMaximalEscapedFieldsStaysOneValidRecord) {
  const std::string nasty(2000, '\x01');
  {
    auto log = Open(Options());
    auto explain = [&] { return nasty; };
    ASSERT_TRUE(log->Record({.kind = EventKind::kAuthentication,
                             .allowed = false,
                             .time_us = 1,
                             .principal = nasty,
                             .tenant = nasty,
                             .action = nasty,
                             .resource = nasty,
                             .request_id = nasty,
                             .remote = nasty,
                             .explain = explain}));
  }
  { auto log = Open(Options()); }  // reopening reads the long record back as the head
  const VerifyReport report = Verify();
  ASSERT_TRUE(report.status.ok()) << report.Summary();
  EXPECT_EQ(report.records, 3);  // header, the event, the checkpoint of the first close
  const std::vector<std::string> lines = Lines();
  EXPECT_GT(lines[1].size(), 7u * 6 * 1024);  // every field escaped in full, none cut short
}

TEST_F(AuditLogTest, ReadingFromAPositionReadsOnlyWhatFollows) {
  WriteLog(5);
  std::vector<uint64_t> offsets;
  ASSERT_TRUE(ReadAuditFile(path_, [&](std::string_view, uint64_t at) {
                offsets.push_back(at);
                return true;
              }).ok());
  ASSERT_EQ(offsets.size(), 7u);
  std::vector<uint64_t> rest;
  ASSERT_TRUE(ReadAuditFile(
                  path_,
                  [&](std::string_view, uint64_t at) {
                    rest.push_back(at);
                    return true;
                  },
                  offsets[4])
                  .ok());
  EXPECT_EQ(rest, std::vector<uint64_t>(offsets.begin() + 4, offsets.end()));
  rest.clear();
  ASSERT_TRUE(ReadAuditFile(
                  path_,
                  [&](std::string_view, uint64_t at) {
                    rest.push_back(at);
                    return true;
                  },
                  fs::file_size(path_))
                  .ok());
  EXPECT_TRUE(rest.empty());
}

TEST_F(AuditLogTest, ReopeningContinuesTheChain) {
  WriteLog(10);
  {
    auto log = Open(Options());
    RecordEvents(*log, 10, 10);
  }
  const VerifyReport report = Verify();
  ASSERT_TRUE(report.status.ok()) << report.Summary();
  EXPECT_EQ(report.records, 1 + 10 + 1 + 10 + 1);
  EXPECT_EQ(report.checkpoints, 2);
}

TEST_F(AuditLogTest, TwoWritersOnOneFileInterleaveIntoOneChain) {
  AuditLogOptions a = Options(false);
  AuditLogOptions b = Options(false);
  auto first = Open(a);
  auto second = Open(b);
  for (int round = 0; round < 20; ++round) {
    RecordEvents(*first, 5, round * 10);
    ASSERT_TRUE(first->Flush().ok());
    RecordEvents(*second, 5, round * 10 + 5);
    ASSERT_TRUE(second->Flush().ok());
  }
  first.reset();
  second.reset();
  const VerifyReport report = Verify();
  ASSERT_TRUE(report.status.ok()) << report.Summary();
  EXPECT_EQ(report.records, 201);
}

// Each kind of tampering is caught and the first bad record is named.
TEST_F(AuditLogTest, AFlippedByteAnywhereIsFoundAtItsRecord) {
  WriteLog(20);
  const std::string original = Bytes();
  const std::vector<std::string> lines = Lines();
  size_t offset = 0;
  for (size_t record = 0; record < lines.size(); ++record) {
    for (size_t at : {size_t(3), lines[record].size() / 2, lines[record].size() - 1}) {
      std::string bytes = original;
      bytes[offset + at] ^= 0x01;
      SetBytes(bytes);
      const VerifyReport report = Verify();
      EXPECT_FALSE(report.status.ok()) << "record " << record << " byte " << at;
      EXPECT_EQ(report.first_bad_record, int64_t(record)) << report.Summary();
    }
    offset += lines[record].size() + 1;
  }
}

TEST_F(AuditLogTest, DeletedDuplicatedAndReorderedRecordsAreFound) {
  WriteLog(20);
  const std::vector<std::string> lines = Lines();
  {
    std::vector<std::string> deleted = lines;
    deleted.erase(deleted.begin() + 7);
    WriteLines(deleted);
    const VerifyReport report = Verify();
    EXPECT_EQ(report.first_bad_record, 7) << report.Summary();
    EXPECT_NE(report.status.message().find("deleted, inserted or reordered"), std::string::npos);
  }
  {
    std::vector<std::string> duplicated = lines;
    duplicated.insert(duplicated.begin() + 5, lines[4]);
    WriteLines(duplicated);
    EXPECT_EQ(Verify().first_bad_record, 5);
  }
  {
    std::vector<std::string> swapped = lines;
    std::swap(swapped[9], swapped[10]);
    WriteLines(swapped);
    EXPECT_EQ(Verify().first_bad_record, 9);
  }
  {
    // Rewriting a record and every hash after it is possible without the key, but the
    // signed checkpoint then no longer matches.
    std::vector<std::string> rewritten;
    Chain chain{};
    ChainHasher hasher;
    for (size_t i = 0; i + 1 < lines.size(); ++i) {
      RecordLine line;
      ASSERT_TRUE(SplitRecordLine(lines[i], &line));
      std::string payload(line.payload);
      if (i == 3) payload.replace(payload.find("key:abc"), 7, "key:xyz");
      chain = hasher.Link(chain, payload);
      rewritten.push_back(payload + " " + ChainHex(chain));
    }
    rewritten.push_back(lines.back());  // the checkpoint, signed over the old head
    WriteLines(rewritten);
    const VerifyReport report = Verify();
    EXPECT_EQ(report.first_bad_record, int64_t(lines.size() - 1)) << report.Summary();
  }
  WriteLines(lines);
  EXPECT_TRUE(Verify().status.ok());
}

TEST_F(AuditLogTest, TruncationBelowTheLastCheckpointIsFound) {
  WriteLog(20);
  std::vector<std::string> lines = Lines();
  for (size_t keep : {size_t(0), size_t(1), size_t(10), lines.size() - 1}) {
    WriteLines(std::vector<std::string>(lines.begin(), lines.begin() + keep));
    const VerifyReport report = Verify();
    EXPECT_FALSE(report.status.ok()) << keep;
    EXPECT_NE(report.status.message().find("truncated"), std::string::npos) << report.Summary();
  }
}

TEST_F(AuditLogTest, ATornTailIsReportedAndRepairedAtEveryCut) {
  WriteLog(5);
  {
    auto log = Open(Options(false));  // events after the checkpoint, not signed yet
    RecordEvents(*log, 2, 100);
  }
  const std::string complete = Bytes();
  const std::vector<std::string> lines = Lines();
  const size_t last_start = complete.size() - lines.back().size() - 1;
  for (size_t cut = last_start + 1; cut < complete.size(); ++cut) {
    SetBytes(complete.substr(0, cut));
    const VerifyReport torn = Verify();
    ASSERT_EQ(torn.first_bad_record, int64_t(lines.size() - 1)) << torn.Summary();
    EXPECT_NE(torn.status.message().find("torn"), std::string::npos);
    auto store = FileAuditStore::Open(path_);
    ASSERT_TRUE(store.ok());
    FileAuditStore* raw = store->get();
    auto log = AuditLog::Start(std::move(*store), Options(false));
    ASSERT_TRUE(log.ok()) << log.status();
    EXPECT_EQ(raw->repaired_bytes(), cut - last_start);
    log->reset();
    const VerifyReport repaired = Verify();
    ASSERT_TRUE(repaired.status.ok()) << repaired.Summary();
    EXPECT_EQ(repaired.records, int64_t(lines.size() - 1));
  }
}

TEST_F(AuditLogTest, AWriterRefusesToExtendAChainWhoseEndWasAltered) {
  WriteLog(5);
  std::vector<std::string> lines = Lines();
  lines.back()[10] = lines.back()[10] == '1' ? '2' : '1';
  WriteLines(lines);
  auto store = FileAuditStore::Open(path_);
  ASSERT_TRUE(store.ok());
  auto log = AuditLog::Start(std::move(*store), Options());
  ASSERT_FALSE(log.ok());
  EXPECT_NE(log.status().message().find("pillar audit verify"), std::string::npos);
}

std::vector<std::string> CheckpointPayloads(const std::vector<std::string>& lines);

// Recomputes the chains of lines[from..] on from the chain of lines[from - 1], as a forger who
// knows the format does after editing payloads: the result holds together as a chain.
void Rechain(std::vector<std::string>& lines, size_t from) {
  Chain chain{};
  if (from > 0) {
    RecordLine previous;
    ASSERT_TRUE(SplitRecordLine(lines[from - 1], &previous));
    ASSERT_TRUE(ParseChainHex(previous.chain_hex, &chain));
  }
  ChainHasher hasher;
  for (size_t i = from; i < lines.size(); ++i) {
    RecordLine line;
    ASSERT_TRUE(SplitRecordLine(lines[i], &line));
    const std::string payload(line.payload);
    chain = hasher.Link(chain, payload);
    lines[i] = payload + " " + ChainHex(chain);
  }
}

// `line` (an event's) with its principal changed, same length.
std::string Forged(std::string line) {
  const size_t at = line.find("key:abc");
  EXPECT_NE(at, std::string::npos) << line;
  if (at != std::string::npos) line.replace(at, 7, "key:xyz");
  return line;
}

// A server and a CLI command append to one chain (the CLI under the same lock): records
// another writer appended after the server's last one link on from it, so the server accepts
// them and its next checkpoint covers them.
TEST_F(AuditLogTest, ARunningWriterAcceptsRecordsAnotherWriterAppends) {
  auto server = Open(Options());
  RecordEvents(*server, 3);
  ASSERT_TRUE(server->Flush().ok());
  {
    auto cli = Open(Options(false));
    RecordEvents(*cli, 2, 100);
  }
  RecordEvents(*server, 3, 3);
  ASSERT_TRUE(server->Flush().ok());
  {
    auto cli = Open(Options(false));
    RecordEvents(*cli, 2, 200);
  }
  server.reset();
  const VerifyReport report = Verify();
  ASSERT_TRUE(report.status.ok()) << report.Summary();
  EXPECT_EQ(report.records, 1 + 3 + 2 + 3 + 2 + 1);
  EXPECT_EQ(report.last_checkpoint, 11);  // the server's final checkpoint covers every record
}

// Someone who can write the file rewrites it under a running server: keeps records 0..K (up
// to a checkpoint, which goes beside the log), drops the rest and appends a forged record with
// a correct chain; or forges the last record in place, keeping the file's size. Either chain
// verifies on its own. The server must not extend it, nor sign a checkpoint over it: it finds
// the record it wrote last no longer where it left it, refuses to append (Flush fails, naming
// the offset) and leaves the file as the forger left it.
TEST_F(AuditLogTest, ARunningWriterRefusesALogRewrittenUnderIt) {
  for (bool same_size : {false, true}) {
    SCOPED_TRACE(same_size ? "the last record forged in place" : "cut and a record forged");
    fs::remove(path_);
    fs::remove(path_ + ".checkpoint");
    WriteLog(5);  // records 0..5, checkpoint 6 (kept beside the log)
    auto server = Open(Options());
    RecordEvents(*server, 10, 10);  // records 7..16
    ASSERT_TRUE(server->Flush().ok());
    std::vector<std::string> lines = Lines();
    ASSERT_EQ(lines.size(), 17u);
    const uint64_t known_end = fs::file_size(path_);
    const std::vector<std::string> checkpoints = CheckpointPayloads(lines);
    ASSERT_EQ(checkpoints.size(), 1u);

    std::vector<std::string> forged;
    if (same_size) {
      forged = lines;
      forged.back() = Forged(forged.back());
      Rechain(forged, forged.size() - 1);
    } else {
      forged.assign(lines.begin(), lines.begin() + 8);  // 0..6 as they were, 7 to be forged
      forged.back() = Forged(forged.back());
      Rechain(forged, 7);
    }
    RewriteUnderLock(forged);
    ASSERT_EQ(fs::file_size(path_) == known_end, same_size);
    const VerifyReport before = Verify();
    ASSERT_TRUE(before.status.ok()) << before.Summary();  // the forgery holds together

    RecordEvents(*server, 1, 50);
    const absl::Status flushed = server->Flush(absl::Milliseconds(500));
    ASSERT_FALSE(flushed.ok());
    EXPECT_NE(flushed.message().find("cut or rewritten"), std::string::npos) << flushed;
    EXPECT_NE(flushed.message().find("byte " + std::to_string(known_end)), std::string::npos)
        << flushed;
    EXPECT_EQ(Lines(), forged);  // not extended
    server.reset();              // the final checkpoint is refused too
    EXPECT_EQ(Lines(), forged);
    EXPECT_EQ(CheckpointPayloads(Lines()), checkpoints);  // none signed over the forgery
    EXPECT_EQ(*ReadPublishedCheckpoint(path_), checkpoints.front());
  }
}

// Records appended after the server's last one are accepted only if they link on from it as
// a verifier would check them, all of them, not only the last two.
TEST_F(AuditLogTest, ARunningWriterRefusesAppendedRecordsThatDoNotLink) {
  auto server = Open(Options());
  RecordEvents(*server, 3);
  ASSERT_TRUE(server->Flush().ok());
  const uint64_t known_end = fs::file_size(path_);
  {
    auto cli = Open(Options(false));
    RecordEvents(*cli, 4, 100);  // records 4..7
  }
  std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 8u);
  lines[5] = Forged(lines[5]);  // its chain no longer matches; the last two records still link
  RewriteUnderLock(lines);
  RecordEvents(*server, 1, 50);
  const absl::Status flushed = server->Flush(absl::Milliseconds(500));
  ASSERT_FALSE(flushed.ok());
  EXPECT_NE(flushed.message().find("record 5"), std::string::npos) << flushed;
  EXPECT_NE(flushed.message().find("after byte " + std::to_string(known_end)), std::string::npos)
      << flushed;
  server.reset();
  EXPECT_EQ(Lines(), lines);
}

// A writer of the audit directory points audit.log at another file (state.db). Following it,
// the torn-tail repair truncated that file; the store must refuse the link and leave it alone.
TEST_F(AuditLogTest, ASymlinkedLogIsRefusedAndItsTargetLeftAlone) {
  const fs::path victim = dir_ / "state.db";
  const std::string contents = std::string("SQLite format 3\0", 16) + std::string(300, 'x');
  std::ofstream(victim, std::ios::binary) << contents;
  fs::create_symlink(victim, path_);
  auto store = FileAuditStore::Open(path_);
  if (store.ok()) {
    auto log = AuditLog::Start(std::move(*store), Options());  // what the server would do
  } else {
    EXPECT_NE(store.status().message().find("symbolic link"), std::string::npos) << store.status();
  }
  EXPECT_FALSE(store.ok());
  std::ifstream in(victim, std::ios::binary);
  std::stringstream read;
  read << in.rdbuf();
  EXPECT_EQ(read.str(), contents);
  EXPECT_TRUE(fs::is_symlink(path_));
}

// A writer of the audit directory points audit.log.checkpoint.tmp at another file: publishing
// a checkpoint must not write through the link.
TEST_F(AuditLogTest, ACheckpointIsNotWrittenThroughASymlinkedTempFile) {
  const fs::path victim = dir_ / "precious";
  std::ofstream(victim) << "keep me\n";
  fs::create_symlink(victim, path_ + ".checkpoint.tmp");
  WriteLog(3);
  std::ifstream in(victim);
  std::stringstream read;
  read << in.rdbuf();
  EXPECT_EQ(read.str(), "keep me\n");
  EXPECT_FALSE(fs::is_symlink(path_ + ".checkpoint"));
  // The temporary file has a random name of its own now; the link is simply never used.
  EXPECT_TRUE(fs::is_symlink(path_ + ".checkpoint.tmp"));
  const VerifyReport report = Verify();
  ASSERT_TRUE(report.status.ok()) << report.Summary();
  EXPECT_EQ(report.published, 4);
}

// The kept checkpoint is never a link (the server replaces it by a rename): a link there is
// someone else's doing, and readers refuse it rather than read what it points at.
TEST_F(AuditLogTest, AKeptCheckpointThatIsASymlinkIsRefused) {
  WriteLog(3);
  const fs::path elsewhere = dir_ / "elsewhere";
  fs::rename(path_ + ".checkpoint", elsewhere);
  fs::create_symlink(elsewhere, path_ + ".checkpoint");
  const absl::StatusOr<std::string> kept = ReadPublishedCheckpoint(path_);
  ASSERT_FALSE(kept.ok());
  EXPECT_NE(kept.status().message().find("symbolic link"), std::string::npos) << kept.status();
  const VerifyReport report = Verify();
  EXPECT_FALSE(report.status.ok());
  EXPECT_NE(report.status.message().find("symbolic link"), std::string::npos) << report.Summary();
}

// A FIFO planted where the log or the kept checkpoint should be: readers and the writer refuse
// it at once instead of waiting for someone to open its other end.
TEST_F(AuditLogTest, AFifoInPlaceOfTheLogIsRefusedWithoutWaiting) {
  ASSERT_EQ(::mkfifo(path_.c_str(), 0600), 0);
  EXPECT_FALSE(FileAuditStore::Open(path_).ok());
  const VerifyReport report = Verify();
  EXPECT_FALSE(report.status.ok());
  EXPECT_NE(report.status.message().find("not a regular file"), std::string::npos)
      << report.Summary();
  fs::remove(path_);
  WriteLog(1);
  fs::remove(path_ + ".checkpoint");
  ASSERT_EQ(::mkfifo((path_ + ".checkpoint").c_str(), 0600), 0);
  EXPECT_FALSE(ReadPublishedCheckpoint(path_).ok());
}

// A store whose Begin() waits until the test opens the gate, so the queue fills.
class GatedStore final : public AuditStore {
 public:
  explicit GatedStore(std::unique_ptr<AuditStore> inner) : inner_(std::move(inner)) {}
  absl::StatusOr<ChainHead> Begin() override {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&open_));
    return inner_->Begin();
  }
  absl::Status Commit(std::span<const EncodedRecord> r, std::string_view lines) override {
    return inner_->Commit(r, lines);
  }
  void Abort() override { inner_->Abort(); }
  absl::Status Sync() override { return inner_->Sync(); }
  absl::Status PublishCheckpoint(std::string_view p) override {
    return inner_->PublishCheckpoint(p);
  }
  std::string Describe() const override { return inner_->Describe(); }
  void Set(bool open) {
    absl::MutexLock lock(&mu_);
    open_ = open;
  }

 private:
  std::unique_ptr<AuditStore> inner_;
  absl::Mutex mu_;
  bool open_ = true;
};

TEST_F(AuditLogTest, ASmallQueueIsWrittenBeforeItFillsWhateverTheBatchDelay) {
  AuditLogOptions options = Options(false);
  options.queue_capacity = 16;
  options.refuse_when_full = true;
  options.batch_delay = absl::Seconds(30);  // the writer must not wait it out
  std::unique_ptr<AuditLog> log = Open(options);
  ASSERT_NE(log, nullptr);
  // A quarter of the capacity is a full batch: 64 records in bursts of 4 are all taken.
  for (int burst = 0; burst < 16; ++burst) {
    RecordEvents(*log, 4, burst * 4);
    ASSERT_TRUE(log->Flush(absl::Seconds(5)).ok()) << "burst " << burst;
  }
  log.reset();
  const VerifyReport report = Verify(false);
  ASSERT_TRUE(report.status.ok()) << report.Summary();
  EXPECT_EQ(report.records, 1 + 64);
}

TEST_F(AuditLogTest, AFullQueueDropsAndCountsOrRefuses) {
  for (bool refuse : {false, true}) {
    fs::remove(path_);
    auto inner = FileAuditStore::Open(path_);
    ASSERT_TRUE(inner.ok());
    auto gated = std::make_unique<GatedStore>(std::move(*inner));
    GatedStore* gate = gated.get();
    AuditLogOptions options = Options(false);
    options.queue_capacity = 4;
    options.refuse_when_full = refuse;
    auto log = AuditLog::Start(std::move(gated), options);
    ASSERT_TRUE(log.ok());
    gate->Set(false);
    // What the blocked writer holds counts against the capacity like what is queued: 4 in all.
    int refused = 0;
    for (int i = 0; i < 20; ++i) {
      Event e;
      e.kind = EventKind::kLimit;
      e.principal = "p";
      if (!(*log)->Record(e)) ++refused;
    }
    if (refuse) {
      EXPECT_EQ(refused, 16);
      EXPECT_EQ((*log)->dropped(), 0);
    } else {
      EXPECT_EQ(refused, 0);
      EXPECT_EQ((*log)->dropped(), 16);
    }
    const int64_t dropped = (*log)->dropped();
    gate->Set(true);
    ASSERT_TRUE((*log)->Flush().ok());
    log->reset();
    const VerifyReport report = Verify(false);
    ASSERT_TRUE(report.status.ok()) << report.Summary();
    const int64_t lost = refuse ? refused : dropped;
    EXPECT_EQ(report.records, 1 + 20 - lost) << "refuse=" << refuse;
  }
}

// A store whose appends and syncs fail on demand, as a full or failing disk makes them: a
// failed Commit writes nothing (as FileAuditStore takes a partial write back), a failed Sync
// leaves what was written in place.
class FaultyStore final : public AuditStore {
 public:
  explicit FaultyStore(std::unique_ptr<AuditStore> inner) : inner_(std::move(inner)) {}
  absl::StatusOr<ChainHead> Begin() override { return inner_->Begin(); }
  absl::Status Commit(std::span<const EncodedRecord> r, std::string_view lines) override {
    ++commits_;
    if (fail_commits_) {
      inner_->Abort();
      return absl::ResourceExhaustedError("injected: no space left on device");
    }
    return inner_->Commit(r, lines);
  }
  void Abort() override { inner_->Abort(); }
  absl::Status Sync() override {
    ++syncs_;
    if (failing_syncs_ != 0) {
      if (failing_syncs_ > 0) --failing_syncs_;
      return absl::InternalError("injected: cannot sync audit log: Input/output error");
    }
    return inner_->Sync();
  }
  absl::Status PublishCheckpoint(std::string_view p) override {
    return inner_->PublishCheckpoint(p);
  }
  std::string Describe() const override { return inner_->Describe(); }

  void FailCommits(bool fail) { fail_commits_ = fail; }
  // The next `n` syncs fail; -1: every one until FailSyncs(0).
  void FailSyncs(int n) { failing_syncs_ = n; }
  int commits() const { return commits_; }
  int syncs() const { return syncs_; }

 private:
  std::unique_ptr<AuditStore> inner_;
  std::atomic<bool> fail_commits_ = false;
  std::atomic<int> failing_syncs_ = 0;
  std::atomic<int> commits_ = 0;
  std::atomic<int> syncs_ = 0;
};

// Polls `done` (the writer retries every 100 ms) for up to 10 s.
template <typename Fn>
bool Eventually(Fn done) {
  for (int i = 0; i < 1000; ++i) {
    if (done()) return true;
    ::usleep(10'000);
  }
  return done();
}

// The request ids of the events in the log, in order.
std::vector<std::string> RequestIds(const std::vector<std::string>& lines) {
  std::vector<std::string> ids;
  for (const std::string& line : lines) {
    const size_t at = line.find(R"("request_id":")");
    if (at == std::string::npos) continue;
    const size_t start = at + 14;
    ids.push_back(line.substr(start, line.find('"', start) - start));
  }
  return ids;
}

// With the store failing, what the writer keeps for its retries counts against the capacity:
// once it is reached, Record() refuses (or drops), however many retries the writer makes; and
// when the store recovers, every event accepted is written once, in order.
TEST_F(AuditLogTest, AFailingStoreHoldsNoMoreThanTheCapacityAndWritesItOnceOnRecovery) {
  constexpr size_t kCapacity = 8;
  for (bool refuse : {true, false}) {
    SCOPED_TRACE(refuse ? "on_full = refuse" : "on_full = drop");
    fs::remove(path_);
    auto inner = FileAuditStore::Open(path_);
    ASSERT_TRUE(inner.ok());
    auto faulty = std::make_unique<FaultyStore>(std::move(*inner));
    FaultyStore* store = faulty.get();
    AuditLogOptions options = Options(false);
    options.queue_capacity = kCapacity;
    options.refuse_when_full = refuse;
    auto log = AuditLog::Start(std::move(faulty), options);
    ASSERT_TRUE(log.ok()) << log.status();
    store->FailCommits(true);
    std::vector<std::string> accepted;
    int refused = 0;
    auto record = [&](int i) {
      const std::string request = "req-" + std::to_string(i);
      const int64_t dropped = (*log)->dropped();
      if (!(*log)->Record({.kind = EventKind::kAuthorization,
                           .allowed = true,
                           .time_us = 1'800'000'000'000'000 + i,
                           .principal = "key:abc",
                           .tenant = "acme",
                           .action = "infer",
                           .resource = "model:digits/1",
                           .request_id = request,
                           .remote = "127.0.0.1"})) {
        ++refused;
      } else if ((*log)->dropped() == dropped) {
        accepted.push_back(request);
      }
    };
    for (int i = 0; i < 20; ++i) record(i);
    // Let the writer fail and retry a few times: each retry used to empty the queue into the
    // batch it keeps, which let the queue take new events without bound.
    const int commits = store->commits();
    ASSERT_TRUE(Eventually([&] { return store->commits() >= commits + 3; }));
    for (int i = 20; i < 40; ++i) record(i);
    // Every accepted event is still in memory (none could be written): that is the bound.
    EXPECT_EQ(accepted.size(), kCapacity);
    if (refuse) {
      EXPECT_EQ(refused, 40 - int(kCapacity));
      EXPECT_EQ((*log)->dropped(), 0);
    } else {
      EXPECT_EQ(refused, 0);
      EXPECT_EQ((*log)->dropped(), 40 - int(kCapacity));
    }
    EXPECT_FALSE((*log)->Flush(absl::Milliseconds(200)).ok());

    store->FailCommits(false);
    ASSERT_TRUE((*log)->Flush().ok());
    log->reset();
    const VerifyReport report = Verify(false);
    ASSERT_TRUE(report.status.ok()) << report.Summary();
    EXPECT_EQ(RequestIds(Lines()), accepted);
  }
}

// A batch whose write succeeded is in the chain even when the sync after it fails: only the
// sync is retried. Writing the batch again (as a checkpoint batch used to be) records every
// event twice, under new sequence numbers.
TEST_F(AuditLogTest, AFailedSyncIsRetriedAloneAndNoRecordIsWrittenTwice) {
  auto inner = FileAuditStore::Open(path_);
  ASSERT_TRUE(inner.ok());
  auto faulty = std::make_unique<FaultyStore>(std::move(*inner));
  FaultyStore* store = faulty.get();
  AuditLogOptions options = Options();
  options.checkpoint_interval = absl::ZeroDuration();  // every batch ends in a checkpoint
  auto log = AuditLog::Start(std::move(faulty), options);
  ASSERT_TRUE(log.ok()) << log.status();

  // Once: the write stands, the sync is tried again and succeeds.
  store->FailSyncs(1);
  RecordEvents(**log, 5);
  ASSERT_TRUE((*log)->Flush().ok());

  // Until the disk recovers: Flush reports the error meanwhile, the sync keeps being retried.
  store->FailSyncs(-1);
  RecordEvents(**log, 5, 5);
  const absl::Status failing = (*log)->Flush(absl::Milliseconds(300));
  EXPECT_FALSE(failing.ok());
  EXPECT_NE(failing.message().find("injected: cannot sync"), std::string::npos) << failing;
  const int syncs = store->syncs();
  ASSERT_TRUE(Eventually([&] { return store->syncs() >= syncs + 2; }));
  store->FailSyncs(0);
  ASSERT_TRUE((*log)->Flush().ok());

  RecordEvents(**log, 5, 10);  // and the log goes on
  log->reset();
  const VerifyReport report = Verify();
  ASSERT_TRUE(report.status.ok()) << report.Summary();
  std::vector<std::string> expected;
  for (int i = 0; i < 15; ++i) expected.push_back("req-" + std::to_string(i));
  EXPECT_EQ(RequestIds(Lines()), expected);
  EXPECT_EQ(report.records - 1 - report.checkpoints, 15);
  EXPECT_EQ(report.published, report.last_checkpoint);
}

// Holds the log's flock from another open file description, as `flock audit.log sleep 1d` does:
// anyone who may open the file can.
class HeldLock {
 public:
  explicit HeldLock(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    held_ = fd_ >= 0 && ::flock(fd_, LOCK_EX) == 0;
  }
  ~HeldLock() { Release(); }
  HeldLock(const HeldLock&) = delete;
  HeldLock& operator=(const HeldLock&) = delete;
  bool held() const { return held_; }
  void Release() {
    if (fd_ < 0) return;
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
  bool held_ = false;
};

Event KeyEvent() {
  Event e;
  e.kind = EventKind::kKey;
  e.allowed = true;
  e.principal = "local:op";
  return e;
}

// Short, so the tests are; the default (2 s) is the same code with a longer deadline.
constexpr absl::Duration kLockWait = absl::Milliseconds(300);

// Polls `done` every 10 ms until `within` has passed.
template <typename Fn>
bool Within(absl::Duration within, Fn done) {
  const absl::Time deadline = absl::Now() + within;
  while (absl::Now() < deadline) {
    if (done()) return true;
    ::usleep(10'000);
  }
  return done();
}

// pillar_audit_write_errors_total as the metrics page shows it.
uint64_t WriteErrors(const monitor::MetricsRegistry& metrics) {
  const std::string page = metrics.Render();
  constexpr std::string_view kName = "\npillar_audit_write_errors_total ";
  const size_t at = page.find(kName);
  return at == std::string::npos ? 0 : std::stoull(page.substr(at + kName.size()));
}

// Someone holds the log's lock under a running writer. The writer used to block in flock without
// a word (no ALERT, no error counted, Flush() only timing out) for as long as it was held. Now
// each wait for the lock ends after the store's bound as a store error: counted, ALERTed,
// returned by Flush(), and retried, so that once the lock is released every event accepted is
// written, once, in order.
TEST_F(AuditLogTest, AHeldLockIsReportedWithinItsBoundAndNothingIsLostOnceReleased) {
  monitor::MetricsRegistry metrics;
  auto store = FileAuditStore::Open(path_, kLockWait);
  ASSERT_TRUE(store.ok()) << store.status();
  AuditLogOptions options = Options(false);
  options.metrics = &metrics;
  auto log = AuditLog::Start(std::move(*store), options);
  ASSERT_TRUE(log.ok()) << log.status();

  HeldLock lock(path_);
  ASSERT_TRUE(lock.held());
  ::testing::internal::CaptureStderr();
  const absl::Time start = absl::Now();
  RecordEvents(**log, 5);
  const bool counted = Within(absl::Seconds(5), [&] { return WriteErrors(metrics) >= 1; });
  const absl::Duration reported_after = absl::Now() - start;
  const absl::Status flushed = (*log)->Flush(absl::Milliseconds(500));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(counted);
  EXPECT_LT(reported_after, kLockWait + absl::Seconds(1));
  EXPECT_TRUE(absl::IsUnavailable(flushed)) << flushed;
  EXPECT_NE(flushed.message().find("has held its lock (flock) for more than 300ms"),
            std::string::npos)
      << flushed;
  EXPECT_NE(err.find("pillar: ALERT: audit log file " + path_ + ": cannot lock audit log"),
            std::string::npos)
      << err;

  RecordEvents(**log, 5, 5);
  lock.Release();
  ASSERT_TRUE((*log)->Flush().ok());
  log->reset();
  const VerifyReport report = Verify(false);
  ASSERT_TRUE(report.status.ok()) << report.Summary();
  std::vector<std::string> expected;
  for (int i = 0; i < 10; ++i) expected.push_back("req-" + std::to_string(i));
  EXPECT_EQ(RequestIds(Lines()), expected);
}

// The destructor (a server's shutdown, a CLI command's exit) with the lock held: the writer
// gives up after the attempt in progress and one more, and says how many events it could not
// write. It used to wait for the lock however long that took, after "drained; exiting".
TEST_F(AuditLogTest, DestroyingTheLogWhileItsLockIsHeldReturnsWithinABound) {
  auto store = FileAuditStore::Open(path_, kLockWait);
  ASSERT_TRUE(store.ok()) << store.status();
  auto log = AuditLog::Start(std::move(*store), Options(false));
  ASSERT_TRUE(log.ok()) << log.status();
  HeldLock lock(path_);
  ASSERT_TRUE(lock.held());
  RecordEvents(**log, 3);

  ::testing::internal::CaptureStderr();
  std::atomic<bool> destroyed = false;
  std::thread closer([&] {
    log->reset();
    destroyed = true;
  });
  const bool bounded = Within(2 * kLockWait + absl::Seconds(2), [&] { return destroyed.load(); });
  lock.Release();  // lets a writer without a bound finish, so the test fails instead of hanging
  closer.join();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(bounded);
  EXPECT_NE(err.find("pillar: ALERT: audit log file " + path_ +
                     ": stopping with 3 events that could not be written: cannot lock"),
            std::string::npos)
      << err;
  // Reported as lost, and lost: the log holds its header only.
  const VerifyReport report = Verify(false);
  ASSERT_TRUE(report.status.ok()) << report.Summary();
  EXPECT_EQ(report.records, 1);
}

// A CLI change whose record could not be made durable in time is reported as not made. Its
// record, still queued, used to be written by the destructor as soon as the lock was released:
// the log then said "ok" for a change that was not made. Abandoned, it never is.
TEST_F(AuditLogTest, AnAbandonedRecordIsNeverWrittenAfterTheLockIsReleased) {
  auto store = FileAuditStore::Open(path_, kLockWait);
  ASSERT_TRUE(store.ok()) << store.status();
  auto log = AuditLog::Start(std::move(*store), Options(false));
  ASSERT_TRUE(log.ok()) << log.status();
  HeldLock lock(path_);
  ASSERT_TRUE(lock.held());
  RecordEvents(**log, 1);
  EXPECT_FALSE((*log)->Flush(absl::Milliseconds(500)).ok());

  const absl::Time start = absl::Now();
  const AuditLog::Abandoned abandoned = (*log)->Abandon();
  EXPECT_LT(absl::Now() - start, kLockWait + absl::Seconds(1));  // a lock wait in progress
  EXPECT_EQ(abandoned.unwritten, 1);
  EXPECT_EQ(abandoned.written, 0);
  EXPECT_FALSE((*log)->Record(KeyEvent()));
  EXPECT_TRUE(absl::IsFailedPrecondition((*log)->Flush(absl::ZeroDuration())));

  lock.Release();
  {
    // Another writer appends and syncs after the release, while the abandoned log still exists
    // (a writer still retrying would get its turn meanwhile); then the abandoned log goes away.
    auto other = Open(Options(false));
    ASSERT_NE(other, nullptr);
    RecordEvents(*other, 1, 1);
    ASSERT_TRUE(other->Flush().ok());
  }
  log->reset();
  const VerifyReport report = Verify(false);
  ASSERT_TRUE(report.status.ok()) << report.Summary();
  EXPECT_EQ(RequestIds(Lines()), std::vector<std::string>{"req-1"});
}

// A store whose Commit() waits until the test opens the gate: an append under way.
class CommitGatedStore final : public AuditStore {
 public:
  explicit CommitGatedStore(std::unique_ptr<AuditStore> inner) : inner_(std::move(inner)) {}
  absl::StatusOr<ChainHead> Begin() override { return inner_->Begin(); }
  absl::Status Commit(std::span<const EncodedRecord> r, std::string_view lines) override {
    absl::MutexLock lock(&mu_);
    entered_ = true;
    mu_.Await(absl::Condition(&open_));
    return inner_->Commit(r, lines);
  }
  void Abort() override { inner_->Abort(); }
  absl::Status Sync() override { return inner_->Sync(); }
  absl::Status PublishCheckpoint(std::string_view p) override {
    return inner_->PublishCheckpoint(p);
  }
  std::string Describe() const override { return inner_->Describe(); }
  void Set(bool open) {
    absl::MutexLock lock(&mu_);
    open_ = open;
    entered_ = false;
  }
  void AwaitEntered() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&entered_));
  }

 private:
  std::unique_ptr<AuditStore> inner_;
  absl::Mutex mu_;
  bool open_ = true;
  bool entered_ = false;
};

// What Abandon() cannot do: take back an append already under way (the chain cannot lose a
// record it was given). It waits for that append and counts it as written, so the caller can
// say that the log may hold the record; nothing else is written afterwards.
TEST_F(AuditLogTest, AbandonWaitsForAnAppendUnderWayAndCountsItAsWritten) {
  auto inner = FileAuditStore::Open(path_);
  ASSERT_TRUE(inner.ok()) << inner.status();
  auto gated = std::make_unique<CommitGatedStore>(std::move(*inner));
  CommitGatedStore* gate = gated.get();
  auto log = AuditLog::Start(std::move(gated), Options(false));
  ASSERT_TRUE(log.ok()) << log.status();
  gate->Set(false);
  RecordEvents(**log, 1);
  gate->AwaitEntered();

  AuditLog::Abandoned abandoned;
  std::thread abandoning([&] { abandoned = (*log)->Abandon(); });
  // Abandon() has taken effect (Flush() says so at once) and waits for the append.
  const bool took_effect =
      Eventually([&] { return absl::IsFailedPrecondition((*log)->Flush(absl::ZeroDuration())); });
  gate->Set(true);
  abandoning.join();
  EXPECT_TRUE(took_effect);
  EXPECT_EQ(abandoned.written, 1);
  EXPECT_EQ(abandoned.unwritten, 0);
  log->reset();
  const VerifyReport report = Verify(false);
  ASSERT_TRUE(report.status.ok()) << report.Summary();
  EXPECT_EQ(RequestIds(Lines()), std::vector<std::string>{"req-0"});
}

// `pillar audit verify` read the log through mmap: a log cut while it was read (by whoever may
// write it) killed the reader with SIGBUS at the first page past the new end. Now the cut is
// an error that says so, whether it lands on bytes not read yet (a log of several chunks) or
// on bytes already read (one chunk). The read runs in a child, so the old crash fails the test
// rather than ending the suite.
TEST_F(AuditLogTest, ALogThatShrinksWhileItIsReadIsAnErrorNotACrash) {
  for (int events : {40, 6000}) {
    SCOPED_TRACE(events);
    fs::remove(path_);
    WriteLog(events);
    ASSERT_GT(fs::file_size(path_), events > 40 ? (1u << 20) + 4096 : 8192u);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      bool cut = false;
      absl::StatusOr<uint64_t> torn = ReadAuditFile(path_, [&](std::string_view, uint64_t) {
        if (!cut) cut = ::truncate(path_.c_str(), 100) == 0;
        return true;
      });
      if (torn.ok()) ::_exit(10);
      const bool said =
          absl::IsDataLoss(torn.status()) &&
          torn.status().message().find("shrank while it was read") != std::string_view::npos;
      ::_exit(said ? 0 : 11);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << "the reader was killed by signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 0) << "10: no error; 11: another error";
  }
}

// ReadAuditFile reads in chunks of 1 MiB: lines that straddle a chunk's end are passed whole and
// at their offsets, a line too long to be a record is passed cut to kMaxLineBytes + 1 bytes (so
// that memory stays bounded), and the bytes after the last LF are counted, from any start.
TEST_F(AuditLogTest, ReadingInChunksPassesEveryLineWholeAndCutsOnlyOverlongOnes) {
  std::vector<std::string> lines;
  std::mt19937 random(7);
  size_t total = 0;
  bool straddles = false;  // an overlong line across the first chunk's end
  while (total < 3 * (1u << 20)) {
    const bool overlong =
        lines.size() == 40 || (!straddles && total >= (1u << 20) - 50'000 && total < (1u << 20));
    straddles = straddles || (overlong && lines.size() != 40);
    const size_t n = overlong ? 3 * format::kMaxLineBytes
                              : std::uniform_int_distribution<size_t>(0, 9000)(random);
    lines.push_back(std::string(n, char('a' + lines.size() % 26)));
    total += n + 1;
  }
  std::string bytes;
  std::vector<uint64_t> offsets;
  for (const std::string& line : lines) {
    offsets.push_back(bytes.size());
    bytes += line + '\n';
  }
  bytes += "torn";
  ASSERT_TRUE(straddles);
  SetBytes(bytes);
  for (size_t first : {size_t(0), size_t(41), lines.size() - 1}) {
    SCOPED_TRACE(first);
    size_t i = first;
    absl::StatusOr<uint64_t> torn = ReadAuditFile(
        path_,
        [&](std::string_view text, uint64_t offset) {
          EXPECT_LT(i, lines.size());
          if (i >= lines.size()) return false;
          EXPECT_EQ(offset, offsets[i]);
          EXPECT_TRUE(text == std::string_view(lines[i]).substr(0, format::kMaxLineBytes + 1))
              << "line " << i << " (" << lines[i].size() << " bytes) passed as " << text.size()
              << " bytes";
          ++i;
          return true;
        },
        offsets[first]);
    ASSERT_TRUE(torn.ok()) << torn.status();
    EXPECT_EQ(*torn, 4u);
    EXPECT_EQ(i, lines.size());
  }
}

TEST_F(AuditLogTest, AnAnchorIsACheckpointsPayloadOrCountAndHead) {
  WriteLog(3);
  auto payload = ReadPublishedCheckpoint(path_);
  ASSERT_TRUE(payload.ok()) << payload.status();
  auto checkpoint = ParseCheckpoint(*payload);
  ASSERT_TRUE(checkpoint.ok());
  auto from_payload = ParseAnchor(*payload + "\n");
  ASSERT_TRUE(from_payload.ok()) << from_payload.status();
  EXPECT_EQ(from_payload->count, 4);
  EXPECT_EQ(from_payload->head, checkpoint->head);
  EXPECT_EQ(from_payload->checkpoint, *payload);
  auto from_value = ParseAnchor("4:" + checkpoint->head);
  ASSERT_TRUE(from_value.ok()) << from_value.status();
  EXPECT_EQ(from_value->count, 4);
  EXPECT_EQ(from_value->head, checkpoint->head);
  EXPECT_TRUE(from_value->checkpoint.empty());
  const std::vector<std::string> lines = Lines();
  const std::string event = lines[1].substr(0, lines[1].size() - 65);
  for (const std::string& bad :
       {"4:" + checkpoint->head.substr(1), "4:" + std::string(64, 'X'), "0:" + checkpoint->head,
        "-1:" + checkpoint->head, checkpoint->head, std::string(), event}) {
    EXPECT_FALSE(ParseAnchor(bad).ok()) << bad;
  }
}

// The payloads of the checkpoints among `lines`, oldest first.
std::vector<std::string> CheckpointPayloads(const std::vector<std::string>& lines) {
  std::vector<std::string> payloads;
  for (const std::string& text : lines) {
    RecordLine line;
    if (SplitRecordLine(text, &line) && IsCheckpointPayload(line.payload)) {
      payloads.emplace_back(line.payload);
    }
  }
  return payloads;
}

VerifyOptions WithAnchor(Anchor anchor) {
  VerifyOptions options;
  options.anchor = std::move(anchor);
  return options;
}

VerifyOptions WithMinRecords(int64_t n) {
  VerifyOptions options;
  options.min_records = n;
  return options;
}

bool HasWarning(const VerifyReport& report, std::string_view text) {
  for (const std::string& warning : report.warnings) {
    if (warning.find(text) != std::string::npos) return true;
  }
  return false;
}

// The log cut back to an older checkpoint, with that checkpoint put beside it, is a shorter
// chain that holds together: only an anchor kept elsewhere shows what is missing. Without one,
// verification passes and says loudly what it could not check.
TEST_F(AuditLogTest, ALogCutBackToAnOlderCheckpointFailsOnlyAgainstAnAnchor) {
  for (int session = 0; session < 5; ++session) {
    auto log = Open(Options());
    RecordEvents(*log, 10, session * 10);
  }
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 56u);  // the header, then 5 x (10 events, a checkpoint)
  const std::vector<std::string> checkpoints = CheckpointPayloads(lines);
  ASSERT_EQ(checkpoints.size(), 5u);
  auto newest = ParseAnchor(checkpoints.back());  // what `pillar audit anchor` prints
  ASSERT_TRUE(newest.ok());
  ASSERT_EQ(newest->count, 55);
  VerifyReport intact = VerifyAuditFile(path_, {key_.public_key}, WithAnchor(*newest));
  ASSERT_TRUE(intact.status.ok()) << intact.Summary();
  EXPECT_TRUE(intact.warnings.empty()) << intact.warnings.front();
  EXPECT_EQ(intact.newest_checkpoint, checkpoints.back());

  // Cut to 12 records, ending in the first checkpoint, which goes beside the log.
  WriteLines(std::vector<std::string>(lines.begin(), lines.begin() + 12));
  std::ofstream(path_ + ".checkpoint", std::ios::trunc) << checkpoints.front() << '\n';
  const VerifyReport unanchored = Verify();
  ASSERT_TRUE(unanchored.status.ok()) << unanchored.Summary();  // nothing here shows the cut
  EXPECT_TRUE(HasWarning(unanchored, "no anchor given")) << unanchored.Summary();

  const VerifyReport anchored = VerifyAuditFile(path_, {key_.public_key}, WithAnchor(*newest));
  ASSERT_FALSE(anchored.status.ok());
  EXPECT_EQ(anchored.first_bad_record, 12);
  EXPECT_NE(anchored.status.message().find(
                "truncated: the anchor covers 55 records and itself, the chain has 12: records "
                "12..55 are missing"),
            std::string::npos)
      << anchored.Summary();
  auto value = ParseAnchor("55:" + newest->head);
  ASSERT_TRUE(value.ok());
  const VerifyReport by_value = VerifyAuditFile(path_, {key_.public_key}, WithAnchor(*value));
  EXPECT_NE(by_value.status.message().find("records 12..54 are missing"), std::string::npos)
      << by_value.Summary();
  const VerifyReport by_count = VerifyAuditFile(path_, {key_.public_key}, WithMinRecords(56));
  EXPECT_NE(by_count.status.message().find("the chain has 12 records, fewer than the 56"),
            std::string::npos)
      << by_count.Summary();
  // An anchor the cut chain still reaches holds.
  auto first = ParseAnchor(checkpoints.front());
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(VerifyAuditFile(path_, {key_.public_key}, WithAnchor(*first)).status.ok());
}

// The kept checkpoint older than the newest one in the chain: the side file was replaced after
// the chain was cut (or publishing it failed). Verification passes, with a warning naming both.
TEST_F(AuditLogTest, AKeptCheckpointOlderThanTheChainsNewestIsWarnedAbout) {
  for (int session = 0; session < 5; ++session) {
    auto log = Open(Options());
    RecordEvents(*log, 10, session * 10);
  }
  const std::vector<std::string> lines = Lines();
  const std::vector<std::string> checkpoints = CheckpointPayloads(lines);
  WriteLines(std::vector<std::string>(lines.begin(), lines.begin() + 34));  // to checkpoint 33
  std::ofstream(path_ + ".checkpoint", std::ios::trunc) << checkpoints.front() << '\n';
  const VerifyReport stale = Verify();
  ASSERT_TRUE(stale.status.ok()) << stale.Summary();
  EXPECT_TRUE(HasWarning(stale,
                         "the checkpoint kept beside the chain (record 11) is older than "
                         "the newest one in the chain (record 33)"))
      << (stale.warnings.empty() ? "no warning" : stale.warnings.front());
  fs::remove(path_ + ".checkpoint");
  const VerifyReport removed = Verify();
  ASSERT_TRUE(removed.status.ok()) << removed.Summary();
  EXPECT_TRUE(HasWarning(removed, "no checkpoint is kept beside the chain"));
}

// An anchor whose record the chain holds with another hash: a chain rewritten (or another
// chain) of at least the same length. The failure names the record.
TEST_F(AuditLogTest, AnAnchorTheChainDoesNotHoldFails) {
  WriteLog(10);
  auto anchor = ParseAnchor(*ReadPublishedCheckpoint(path_));
  ASSERT_TRUE(anchor.ok());
  fs::remove(path_);
  fs::remove(path_ + ".checkpoint");
  WriteLog(10);  // the same shape, other times: other hashes
  const VerifyReport report = VerifyAuditFile(path_, {key_.public_key}, WithAnchor(*anchor));
  ASSERT_FALSE(report.status.ok());
  EXPECT_EQ(report.first_bad_record, 10);
  const std::string expected =
      "the anchor does not match the chain: it says record 10 has chain " + anchor->head;
  EXPECT_NE(report.status.message().find(expected), std::string::npos) << report.Summary();
}

// A writer killed with SIGKILL at random points, thousands of times: after every kill the log
// verifies (once a writer has repaired any torn tail) and holds every event whose Flush()
// returned before the kill.
TEST_F(AuditLogTest, SigkillAtRandomPointsNeverLosesOrAltersAFlushedRecord) {
  std::mt19937 random(42);
  constexpr int kKills = 2000;
  int64_t acknowledged_total = 0;
  for (int kill = 0; kill < kKills; ++kill) {
    if (kill % 100 == 0) {  // a fresh log now and then keeps each verification short
      fs::remove(path_);
      fs::remove(path_ + ".checkpoint");
      acknowledged_total = 0;
    }
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(fds[0]);
      auto store = FileAuditStore::Open(path_);
      if (!store.ok()) ::_exit(2);
      AuditLogOptions options = Options(kill % 2 == 0);
      options.checkpoint_interval = absl::Milliseconds(1);
      auto log = AuditLog::Start(std::move(*store), options);
      if (!log.ok()) ::_exit(3);
      for (int64_t done = 0;;) {
        RecordEvents(**log, 7, int(done));
        if (!(*log)->Flush().ok()) ::_exit(4);
        done += 7;
        if (::write(fds[1], &done, sizeof done) != sizeof done) ::_exit(5);
      }
    }
    ::close(fds[1]);
    ::usleep(std::uniform_int_distribution<int>(0, 3000)(random));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
    int64_t acknowledged = 0;
    for (int64_t n; ::read(fds[0], &n, sizeof n) == sizeof n;) acknowledged = n;
    ::close(fds[0]);
    acknowledged_total += acknowledged;
    if (!fs::exists(path_)) {  // killed before it created the log
      ASSERT_EQ(acknowledged_total, 0);
      continue;
    }
    VerifyReport report = Verify();
    if (!report.status.ok()) {
      // Only a torn tail is allowed, and the next writer removes it.
      ASSERT_GT(report.torn_bytes, 0u) << report.Summary();
      { auto log = Open(Options(false)); }
      report = Verify();
    }
    ASSERT_TRUE(report.status.ok()) << "after kill " << kill << ": " << report.Summary();
    const int64_t events = report.records == 0 ? 0 : report.records - 1 - report.checkpoints;
    ASSERT_GE(events, acknowledged_total) << "kill " << kill;
  }
}

}  // namespace
}  // namespace pillar::audit
