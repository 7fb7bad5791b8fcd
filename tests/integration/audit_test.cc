// `pillar audit anchor` and `pillar audit verify --anchor/--min-records` as an operator runs
// them: exit codes and messages, over a log written in process (the chain is the same whoever
// writes it) and cut back to an older checkpoint, the attack the kept checkpoint cannot show.
// And key changes that cannot be audited where the configuration says: refused, not made.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "audit/audit_log.h"
#include "audit/audit_record.h"
#include "audit/audit_verifier.h"
#include "audit/file_audit_store.h"
#include "signing/signing_key.h"
#include "testing/server_process.h"
#include "testing/temp_dir.h"

namespace pillar {
namespace {

namespace fs = std::filesystem;

class AuditCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_ = (dir_.path() / "audit.log").string();
    pub_ = (dir_.path() / "audit.pub").string();
    ASSERT_TRUE(signing::WriteKeyPair(key_, (dir_.path() / "audit").string()).ok());
  }

  // `sessions` writers one after the other, each recording `events` and closing with a signed
  // checkpoint, as server restarts do.
  void WriteSessions(int sessions, int events, bool checkpoints = true) {
    for (int session = 0; session < sessions; ++session) {
      auto store = audit::FileAuditStore::Open(log_);
      ASSERT_TRUE(store.ok()) << store.status();
      audit::AuditLogOptions options;
      options.instance = "node-7";
      if (checkpoints) options.checkpoint_key = key_;
      auto log = audit::AuditLog::Start(std::move(*store), options);
      ASSERT_TRUE(log.ok()) << log.status();
      for (int i = 0; i < events; ++i) {
        ASSERT_TRUE((*log)->Record({.kind = audit::EventKind::kAuthorization,
                                    .allowed = true,
                                    .time_us = 1'800'000'000'000'000 + i,
                                    .principal = "key:abc",
                                    .tenant = "acme",
                                    .action = "infer",
                                    .resource = "model:digits/1",
                                    .request_id = {},
                                    .remote = {}}));
      }
    }
  }

  std::vector<std::string> Lines() const {
    std::ifstream in(log_);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
  // Keeps the first `n` records and puts the checkpoint record `kept` beside them.
  void CutTo(const std::vector<std::string>& lines, size_t n, size_t kept) {
    std::ofstream out(log_, std::ios::trunc);
    for (size_t i = 0; i < n; ++i) out << lines[i] << '\n';
    audit::RecordLine line;
    ASSERT_TRUE(audit::SplitRecordLine(lines[kept], &line));
    ASSERT_TRUE(audit::IsCheckpointPayload(line.payload)) << lines[kept];
    std::ofstream(log_ + ".checkpoint", std::ios::trunc) << line.payload << '\n';
  }

  // `pillar audit verify --file LOG --key PUB extra...`
  int Verify(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"audit", "verify", "--file", log_, "--key", pub_};
    args.insert(args.end(), extra.begin(), extra.end());
    out_.clear();
    err_.clear();
    return testing::RunPillar(args, &out_, &err_);
  }
  int Anchor() {
    out_.clear();
    err_.clear();
    return testing::RunPillar({"audit", "anchor", "--file", log_, "--key", pub_}, &out_, &err_);
  }

  testing::TempDir dir_;
  testing::TempDir off_host_;  // where the anchor is kept
  signing::SigningKey key_ = signing::GenerateSigningKey();
  std::string log_;
  std::string pub_;
  std::string out_, err_;
};

TEST_F(AuditCliTest, AnAnchorKeptOffTheHostShowsALogCutBackToAnOlderCheckpoint) {
  WriteSessions(5, 10);  // 56 records: the header, then 5 x (10 events, a checkpoint)
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 56u);

  // The anchor is the newest signed checkpoint, one line: what the side file holds now.
  ASSERT_EQ(Anchor(), 0) << err_;
  std::ifstream side(log_ + ".checkpoint");
  std::stringstream kept;
  kept << side.rdbuf();
  EXPECT_EQ(out_, kept.str());
  EXPECT_EQ(out_.rfind(R"({"seq":55,"type":"checkpoint",)", 0), 0u) << out_;
  const std::string anchor_file = (off_host_.path() / "node-7.anchor").string();
  std::ofstream(anchor_file) << out_;
  auto anchor = audit::ParseAnchor(out_);
  ASSERT_TRUE(anchor.ok());
  const std::string value = "55:" + anchor->head;

  // Without an anchor verify passes, and says on stderr what it could not check.
  ASSERT_EQ(Verify({}), 0) << out_ << err_;
  EXPECT_NE(err_.find("pillar audit: WARNING: " + log_ + ": no anchor given"), std::string::npos)
      << err_;
  ASSERT_EQ(Verify({"--anchor", anchor_file}), 0) << out_ << err_;
  EXPECT_EQ(err_, "");
  EXPECT_NE(out_.find("; anchor: 55 records"), std::string::npos) << out_;
  EXPECT_NE(out_.find("; OK"), std::string::npos) << out_;

  // Cut to the first 12 records, the first checkpoint put beside them: a chain that holds.
  CutTo(lines, 12, 11);
  ASSERT_EQ(Verify({}), 0) << out_ << err_;
  EXPECT_NE(err_.find("WARNING"), std::string::npos) << err_;

  EXPECT_EQ(Verify({"--anchor", anchor_file}), 1) << out_ << err_;
  EXPECT_NE(out_.find("FAILED: truncated: the anchor covers 55 records and itself, the chain has "
                      "12: records 12..55 are missing from its end"),
            std::string::npos)
      << out_;
  EXPECT_EQ(Verify({"--anchor", value}), 1) << out_ << err_;
  EXPECT_NE(out_.find("records 12..54 are missing"), std::string::npos) << out_;
  EXPECT_EQ(Verify({"--min-records", "56"}), 1) << out_ << err_;
  EXPECT_NE(out_.find("FAILED: truncated: the chain has 12 records, fewer than the 56"),
            std::string::npos)
      << out_;
  EXPECT_EQ(Verify({"--min-records", "12"}), 0) << out_ << err_;

  // An anchor that cannot be read or is not one: exit 2, with the reason.
  EXPECT_EQ(Verify({"--anchor", (off_host_.path() / "missing").string()}), 2);
  EXPECT_NE(err_.find("--anchor"), std::string::npos) << err_;
  std::ofstream(off_host_.path() / "bad.anchor") << "not an anchor\n";
  EXPECT_EQ(Verify({"--anchor", (off_host_.path() / "bad.anchor").string()}), 2);
  EXPECT_NE(err_.find("COUNT:HEAD"), std::string::npos) << err_;
}

TEST_F(AuditCliTest, AKeptCheckpointOlderThanTheChainsNewestIsWarnedAbout) {
  WriteSessions(3, 4);  // checkpoints at 5, 10 and 15
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 16u);
  CutTo(lines, 11, 5);
  ASSERT_EQ(Verify({}), 0) << out_ << err_;
  EXPECT_NE(err_.find("the checkpoint kept beside the chain (record 5) is older than the newest "
                      "one in the chain (record 10)"),
            std::string::npos)
      << err_;
}

TEST_F(AuditCliTest, NoAnchorIsTakenFromAChainThatDoesNotVerifyOrHasNoCheckpoint) {
  WriteSessions(1, 3, /*checkpoints=*/false);
  EXPECT_EQ(Anchor(), 1);
  EXPECT_EQ(out_, "");
  EXPECT_NE(err_.find("holds no signed checkpoint yet"), std::string::npos) << err_;

  WriteSessions(1, 3);
  ASSERT_EQ(Anchor(), 0) << err_;
  std::vector<std::string> lines = Lines();
  lines[2][lines[2].find("key:abc") + 4] = 'x';
  {
    std::ofstream out(log_, std::ios::trunc);
    for (const std::string& line : lines) out << line << '\n';
  }
  EXPECT_EQ(Anchor(), 1);
  EXPECT_EQ(out_, "");
  EXPECT_NE(err_.find("does not verify; no anchor taken"), std::string::npos) << err_;
}

// A value with the COUNT:HEAD shape that is not a valid anchor is reported as a bad anchor,
// not looked up as a file ("no such file" sent operators looking for a missing file).
TEST_F(AuditCliTest, AMalformedInlineAnchorIsReportedAsOne) {
  WriteSessions(1, 2);
  for (const std::string& bad : {std::string("0:abc"), std::string("-5:abc"),
                                 std::string("12:not-hex"), "0:" + std::string(64, 'a')}) {
    EXPECT_EQ(Verify({"--anchor", bad}), 2) << bad;
    EXPECT_EQ(err_.find("no such file"), std::string::npos) << err_;
    EXPECT_NE(err_.find("--anchor " + bad + ": "), std::string::npos) << err_;
    EXPECT_NE(err_.find(bad[0] == '0' && bad.size() > 10 ? "count is at least 1" : "COUNT:HEAD"),
              std::string::npos)
        << err_;
  }
  // A file whose name merely contains a colon is still read as a file.
  auto anchor = audit::ParseAnchor(*audit::ReadPublishedCheckpoint(log_));
  ASSERT_TRUE(anchor.ok());
  const std::string file = (off_host_.path() / "node:7.anchor").string();
  std::ofstream(file) << anchor->count << ":" << anchor->head << "\n";
  EXPECT_EQ(Verify({"--anchor", file}), 0) << out_ << err_;
}

// `pillar key create` when the audit log takes no more writes (RLIMIT_FSIZE at its size: a full
// disk as far as the log is concerned) although it opens and its end verifies. The change
// cannot be audited, so it is not made: nothing printed, no key in the store. It used to be
// made first and its record then lost: a working key with no trace in the log.
TEST(KeyChangeAuditTest, AKeyIsNotCreatedWhenItsAuditRecordCannotBeWritten) {
  testing::ServerProcess server;
  ASSERT_FALSE(server.CreateKey("first").empty());  // the log now holds a header and a record
  const std::string config = server.config_path().string();
  {
    // Grow the log well past the state database, so that a size limit at the log's size stops
    // the log's next append and nothing the key store writes.
    auto store = audit::FileAuditStore::Open(server.audit_log().string());
    ASSERT_TRUE(store.ok()) << store.status();
    audit::AuditLogOptions options;
    options.fsync_interval = absl::InfiniteDuration();
    auto log = audit::AuditLog::Start(std::move(*store), options);
    ASSERT_TRUE(log.ok()) << log.status();
    const std::string reason(900, 'r');
    for (int i = 0; i < 1200; ++i) {
      ASSERT_TRUE((*log)->Record({.kind = audit::EventKind::kPolicy,
                                  .allowed = true,
                                  .time_us = 1'800'000'000'000'000 + i,
                                  .principal = "pillar",
                                  .tenant = {},
                                  .action = "load",
                                  .resource = "padding",
                                  .request_id = {},
                                  .remote = {},
                                  .explain = [&reason] { return reason; }}));
    }
  }
  const uintmax_t log_size = fs::file_size(server.audit_log());
  ASSERT_GT(log_size, 8 * fs::file_size(server.state_path()));

  struct rlimit original {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &original), 0);
  // Ignored, a signal stays ignored across exec: the write fails with EFBIG instead of killing.
  auto previous = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit limited = original;
  limited.rlim_cur = rlim_t(log_size);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::string out, err;
  const int rc = testing::RunPillar(
      {"key", "create", "-c", config, "--name", "unaudited", "--role", "admin"}, &out, &err);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &original), 0);
  std::signal(SIGXFSZ, previous);

  EXPECT_NE(rc, 0) << out << err;
  EXPECT_EQ(out, "");  // no key printed
  EXPECT_NE(err.find("not made"), std::string::npos) << err;
  EXPECT_EQ(fs::file_size(server.audit_log()), log_size);
  std::string list;
  ASSERT_EQ(testing::RunPillar({"key", "list", "--json", "-c", config}, &list), 0);
  EXPECT_NE(list.find("\"name\":\"first\""), std::string::npos) << list;
  EXPECT_EQ(list.find("unaudited"), std::string::npos) << list;
}

// How `pillar args...`, run in `cwd`, ended: its exit code, or killed after `limit`.
struct Ran {
  int rc = -1;
  bool timed_out = false;
  std::chrono::milliseconds took{0};
  std::string out, err;
};

Ran RunPillarIn(const fs::path& cwd, const std::vector<std::string>& args,
                std::chrono::seconds limit) {
  Ran ran;
  testing::TempDir outputs;  // files, not pipes: nothing to drain while polling for the exit
  const std::string out = (outputs.path() / "out").string();
  const std::string err = (outputs.path() / "err").string();
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (o < 0 || e < 0 || ::dup2(o, 1) < 0 || ::dup2(e, 2) < 0 || ::chdir(cwd.c_str()) != 0) {
      ::_exit(126);
    }
    std::vector<char*> argv;
    std::string binary = testing::PillarBinary();
    argv.push_back(binary.data());
    std::vector<std::string> copy = args;
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - start > limit) {
      ran.timed_out = true;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ran.took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  if (!ran.timed_out && WIFEXITED(status)) ran.rc = WEXITSTATUS(status);
  auto read = [](const std::string& path) {
    std::stringstream text;
    text << std::ifstream(path).rdbuf();
    return text.str();
  };
  ran.out = read(out);
  ran.err = read(err);
  return ran;
}

// The log's records of `action` on key `id` ("create" on "key:<id>").
int KeyRecords(const fs::path& log, const std::string& action, const std::string& id) {
  std::ifstream in(log);
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"action\":\"" + action + "\"") != std::string::npos &&
        line.find("\"resource\":\"key:" + id + "\"") != std::string::npos) {
      ++n;
    }
  }
  return n;
}

// Someone holds the audit log's lock (`flock audit.log sleep 1d`). `pillar key create` used to
// wait for it without a word, however long. Now it is refused within the store's lock wait
// (2 s), says why, makes no key, and writes no record, not even once the lock is released.
TEST(KeyChangeAuditTest, AKeyChangeIsRefusedWithinABoundWhileTheLogsLockIsHeld) {
  testing::ServerProcess server;
  ASSERT_FALSE(server.CreateKey("first").empty());  // the log exists, with a record
  const std::string config = server.config_path().string();
  const uintmax_t log_size = fs::file_size(server.audit_log());

  const int fd = ::open(server.audit_log().c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  const Ran ran = RunPillarIn(
      server.dir(),
      {"key", "create", "-c", config, "--name", "locked-out", "--role", "admin", "--json"},
      std::chrono::seconds(20));
  ::flock(fd, LOCK_UN);
  ::close(fd);

  EXPECT_FALSE(ran.timed_out) << "still waiting for the lock after 20 s";
  EXPECT_LT(ran.took, std::chrono::seconds(8));
  EXPECT_NE(ran.rc, 0) << ran.out << ran.err;
  EXPECT_EQ(ran.out, "");  // no key printed
  EXPECT_NE(ran.err.find("not made"), std::string::npos) << ran.err;
  EXPECT_NE(ran.err.find("held its lock"), std::string::npos) << ran.err;
  std::string list;
  ASSERT_EQ(testing::RunPillar({"key", "list", "--json", "-c", config}, &list), 0);
  EXPECT_EQ(list.find("locked-out"), std::string::npos) << list;
  // Once released, the log takes changes again, and holds nothing of the refused one.
  ASSERT_FALSE(server.CreateKey("second").empty());
  std::stringstream text;
  text << std::ifstream(server.audit_log()).rdbuf();
  EXPECT_EQ(text.str().find("locked-out"), std::string::npos) << text.str();
  EXPECT_GT(fs::file_size(server.audit_log()), log_size);
}

// `pillar key create --state DB` without -c: the change used to be audited to ./audit.log in
// whatever directory the command ran from, so the log the server's configuration names never
// recorded it. Without a configuration no log is known, and the change is refused; with one,
// its log records the change whatever --state and the working directory are.
TEST(KeyChangeAuditTest, AKeyChangeIsAuditedInTheConfiguredLogOrRefused) {
  testing::ServerProcess server;
  server.WriteConfig();
  testing::TempDir elsewhere;  // the operator's working directory
  testing::TempDir data;
  const fs::path state = data.path() / "state.db";

  Ran ran = RunPillarIn(
      elsewhere.path(),
      {"key", "create", "--state", state.string(), "--name", "stray", "--role", "admin"},
      std::chrono::seconds(20));
  EXPECT_EQ(ran.rc, 1) << ran.out << ran.err;
  EXPECT_EQ(ran.out, "");
  EXPECT_NE(ran.err.find("give the server's configuration with -c"), std::string::npos) << ran.err;
  EXPECT_FALSE(fs::exists(elsewhere.path() / "audit.log"));
  EXPECT_FALSE(fs::exists(data.path() / "audit.log"));
  ran = RunPillarIn(elsewhere.path(), {"key", "list", "--state", state.string()},
                    std::chrono::seconds(20));
  EXPECT_EQ(ran.rc, 0) << ran.err;  // reading needs no audit log
  EXPECT_EQ(ran.out.find("stray"), std::string::npos) << ran.out;

  ran = RunPillarIn(elsewhere.path(),
                    {"key", "create", "-c", server.config_path().string(), "--state",
                     state.string(), "--name", "placed", "--role", "admin"},
                    std::chrono::seconds(20));
  ASSERT_EQ(ran.rc, 0) << ran.err;
  ASSERT_EQ(ran.out.rfind("pk_", 0), 0u) << ran.out;
  EXPECT_EQ(KeyRecords(server.audit_log(), "create", ran.out.substr(3, 12)), 1);
  EXPECT_FALSE(fs::exists(elsewhere.path() / "audit.log"));
  EXPECT_FALSE(fs::exists(data.path() / "audit.log"));
}

}  // namespace
}  // namespace pillar
