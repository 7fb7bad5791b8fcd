// The PostgreSQL audit store against a real server started by the fixture: many writers, one
// chain per instance, and the same verifier catching the same tampering as in files, rows moved
// from one instance's chain to another's, and rows cut back to an older checkpoint.
#include "audit/postgres_audit_store.h"

#include <thread>

#include "audit/audit_log.h"
#include "audit/audit_record.h"
#include "gtest/gtest.h"
#include "testing/postgres_server.h"

namespace pillar::audit {
namespace {

class PostgresAuditStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new testing::PostgresServer();
    ASSERT_TRUE(server_->Start()) << server_->error();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    key_ = signing::GenerateSigningKey();
    // The tables may not exist yet in the first test; then there is nothing to clear.
    server_->Execute("TRUNCATE pillar_audit, pillar_audit_checkpoints");
  }

  std::unique_ptr<AuditLog> Open(const std::string& instance, bool checkpoints = true) {
    auto store = PostgresAuditStore::Open(server_->conninfo(), instance);
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return nullptr;
    AuditLogOptions options;
    options.instance = instance;
    if (checkpoints) options.checkpoint_key = key_;
    auto log = AuditLog::Start(std::move(*store), options);
    EXPECT_TRUE(log.ok()) << log.status();
    return log.ok() ? std::move(*log) : nullptr;
  }

  static void RecordEvents(AuditLog& log, int n, std::string_view principal) {
    for (int i = 0; i < n; ++i) {
      Event e;
      e.kind = EventKind::kAuthorization;
      e.allowed = true;
      e.time_us = 1'800'000'000'000'000 + i;
      e.principal = principal;
      e.action = "infer";
      e.resource = "model:a\\b\t\"c\"/1";  // what COPY and JSON must both escape
      log.Record(e);
    }
  }

  VerifyReport Verify(const std::string& instance) {
    return VerifyPostgresChain(server_->conninfo(), instance, {key_.public_key});
  }

  static testing::PostgresServer* server_;
  signing::SigningKey key_;
};

testing::PostgresServer* PostgresAuditStoreTest::server_ = nullptr;

TEST_F(PostgresAuditStoreTest, InstancesKeepSeparateChainsAndWritersOfOneChainInterleave) {
  {
    auto a1 = Open("node-a");
    auto a2 = Open("node-a", false);  // a second process writing node-a's chain
    auto b = Open("node-b");
    std::thread t1([&] { RecordEvents(*a1, 300, "key:one"); });
    std::thread t2([&] { RecordEvents(*a2, 300, "key:two"); });
    std::thread t3([&] { RecordEvents(*b, 300, "key:three"); });
    t1.join();
    t2.join();
    t3.join();
  }
  auto chains = ListPostgresChains(server_->conninfo());
  ASSERT_TRUE(chains.ok()) << chains.status();
  EXPECT_EQ(*chains, (std::vector<std::string>{"node-a", "node-b"}));
  const VerifyReport a = Verify("node-a");
  ASSERT_TRUE(a.status.ok()) << a.Summary();
  EXPECT_EQ(a.instance, "node-a");
  EXPECT_EQ(a.records - a.checkpoints, 1 + 600);
  EXPECT_GE(a.checkpoints, 1);
  EXPECT_EQ(a.published, a.last_checkpoint);
  const VerifyReport b = Verify("node-b");
  ASSERT_TRUE(b.status.ok()) << b.Summary();
  EXPECT_EQ(b.records, 1 + 300 + 1);
}

TEST_F(PostgresAuditStoreTest, TamperingWithRowsIsFoundAndNamed) {
  { RecordEvents(*Open("node-a"), 20, "key:one"); }
  ASSERT_TRUE(Verify("node-a").status.ok());
  ASSERT_TRUE(server_->Execute(
      "UPDATE pillar_audit SET payload = replace(payload, 'key:one', 'key:two') WHERE seq = 5"));
  EXPECT_EQ(Verify("node-a").first_bad_record, 5);
  ASSERT_TRUE(server_->Execute(
      "UPDATE pillar_audit SET payload = replace(payload, 'key:two', 'key:one') WHERE seq = 5"));
  ASSERT_TRUE(Verify("node-a").status.ok());
  ASSERT_TRUE(server_->Execute("DELETE FROM pillar_audit WHERE seq = 9"));
  const VerifyReport deleted = Verify("node-a");
  EXPECT_EQ(deleted.first_bad_record, 9) << deleted.Summary();
  EXPECT_NE(deleted.status.message().find("deleted, inserted or reordered"), std::string::npos);
}

TEST_F(PostgresAuditStoreTest, DeletingTheNewestRowsBelowTheCheckpointIsFound) {
  { RecordEvents(*Open("node-a"), 20, "key:one"); }
  ASSERT_TRUE(server_->Execute("DELETE FROM pillar_audit WHERE seq >= 15"));
  const VerifyReport report = Verify("node-a");
  EXPECT_NE(report.status.message().find("truncated"), std::string::npos) << report.Summary();
}

TEST_F(PostgresAuditStoreTest, AWriterRefusesAChainWhoseLastRowWasAltered) {
  { RecordEvents(*Open("node-a", false), 5, "key:one"); }
  ASSERT_TRUE(
      server_->Execute("UPDATE pillar_audit SET payload = replace(payload, 'key:one', 'key:two') "
                       "WHERE seq = (SELECT max(seq) FROM pillar_audit)"));
  auto store = PostgresAuditStore::Open(server_->conninfo(), "node-a");
  ASSERT_TRUE(store.ok());
  AuditLogOptions options;
  options.instance = "node-a";
  auto log = AuditLog::Start(std::move(*store), options);
  ASSERT_FALSE(log.ok());
  EXPECT_NE(log.status().message().find("pillar audit verify"), std::string::npos);
}

// Another instance's rows put under this instance's name form a chain that holds together:
// only its header, which names the instance it was written for, shows the swap.
TEST_F(PostgresAuditStoreTest, AChainWhoseHeaderNamesAnotherInstanceIsFound) {
  { RecordEvents(*Open("node-a"), 5, "key:one"); }
  { RecordEvents(*Open("node-b"), 5, "key:two"); }
  ASSERT_TRUE(Verify("node-b").status.ok());
  ASSERT_TRUE(server_->Execute("DELETE FROM pillar_audit WHERE instance = 'node-b'"));
  ASSERT_TRUE(server_->Execute(
      "INSERT INTO pillar_audit SELECT 'node-b', seq, payload, chain FROM pillar_audit "
      "WHERE instance = 'node-a'"));
  ASSERT_TRUE(server_->Execute(
      "UPDATE pillar_audit_checkpoints SET payload = (SELECT payload FROM "
      "pillar_audit_checkpoints WHERE instance = 'node-a') WHERE instance = 'node-b'"));
  const VerifyReport report = Verify("node-b");
  ASSERT_FALSE(report.status.ok());
  EXPECT_EQ(report.first_bad_record, 0);
  EXPECT_NE(report.status.message().find(
                "the header names instance 'node-a', but this is the chain of instance 'node-b'"),
            std::string::npos)
      << report.Summary();
  EXPECT_TRUE(Verify("node-a").status.ok());
}

// Rows deleted back to an older checkpoint, which replaces the kept one: a shorter chain that
// holds together, found only against an anchor taken before.
TEST_F(PostgresAuditStoreTest, RowsCutBackToAnOlderCheckpointFailOnlyAgainstAnAnchor) {
  for (int session = 0; session < 3; ++session) RecordEvents(*Open("node-a"), 10, "key:one");
  std::vector<std::pair<int64_t, std::string>> checkpoints;  // seq, payload
  ASSERT_TRUE(ReadPostgresChain(server_->conninfo(), "node-a",
                                [&](std::string_view payload, std::string_view, uint64_t row) {
                                  if (IsCheckpointPayload(payload)) {
                                    checkpoints.emplace_back(int64_t(row), payload);
                                  }
                                  return true;
                                })
                  .ok());
  ASSERT_EQ(checkpoints.size(), 3u);
  auto anchor = ParseAnchor(checkpoints.back().second);  // what `pillar audit anchor` prints
  ASSERT_TRUE(anchor.ok()) << anchor.status();
  const int64_t first = checkpoints.front().first;
  ASSERT_TRUE(server_->Execute("DELETE FROM pillar_audit WHERE seq > " + std::to_string(first)));
  const std::string kept =
      "(SELECT payload FROM pillar_audit WHERE instance = 'node-a' AND seq = " +
      std::to_string(first) + ")";
  ASSERT_TRUE(server_->Execute("UPDATE pillar_audit_checkpoints SET payload = " + kept));
  const VerifyReport unanchored = Verify("node-a");
  ASSERT_TRUE(unanchored.status.ok()) << unanchored.Summary();
  ASSERT_FALSE(unanchored.warnings.empty());
  EXPECT_NE(unanchored.warnings.back().find("no anchor given"), std::string::npos);
  VerifyOptions options;
  options.anchor = *anchor;
  const VerifyReport anchored =
      VerifyPostgresChain(server_->conninfo(), "node-a", {key_.public_key}, options);
  ASSERT_FALSE(anchored.status.ok());
  EXPECT_EQ(anchored.first_bad_record, first + 1);
  EXPECT_NE(anchored.status.message().find("truncated: the anchor covers"), std::string::npos)
      << anchored.Summary();
}

}  // namespace
}  // namespace pillar::audit
