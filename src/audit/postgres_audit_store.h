// Audit chains in PostgreSQL (through libpq), for many instances writing to one place: one
// chain per instance in table pillar_audit, each row one record with exactly the payload and
// chain a file line would hold, so the same verifier checks both. A transaction-scoped
// advisory lock per instance serializes the writers of one chain; COMMIT (synchronous_commit
// on, PostgreSQL's default) is the durability point, so Sync() has nothing left to do.
//
//   PILLAR_ASSIGN_OR_RETURN(auto store, PostgresAuditStore::Open("host=db dbname=pillar",
//   "node-7")); VerifyReport report = VerifyPostgresChain("host=db dbname=pillar", "node-7", keys);
// The schema (created when missing) is in docs/formats/audit-log.md.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "audit/audit_store.h"
#include "audit/audit_verifier.h"

typedef struct pg_conn PGconn;

namespace pillar::audit {

class PostgresAuditStore final : public AuditStore {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<PostgresAuditStore>> Open(
      std::string conninfo, std::string instance);
  ~PostgresAuditStore() override;

  [[nodiscard]] absl::StatusOr<ChainHead> Begin() override;
  [[nodiscard]] absl::Status Commit(std::span<const EncodedRecord> records,
                                    std::string_view lines) override;
  void Abort() override;
  [[nodiscard]] absl::Status Sync() override { return absl::OkStatus(); }
  [[nodiscard]] absl::Status PublishCheckpoint(std::string_view payload) override;
  std::string Describe() const override { return "postgres chain " + instance_; }

 private:
  PostgresAuditStore(std::string conninfo, std::string instance)
      : conninfo_(std::move(conninfo)), instance_(std::move(instance)) {}
  // Connects (again, after a lost connection) and creates the tables when missing.
  [[nodiscard]] absl::Status Connect();

  const std::string conninfo_;
  const std::string instance_;
  PGconn* conn_ = nullptr;
  ChainHasher hasher_;
};

// Calls `record` with each record of `instance`'s chain from sequence number `from` on, in order
// (payload, chain hex, row number counted from `from`) until it returns false.
[[nodiscard]] absl::Status ReadPostgresChain(
    const std::string& conninfo, const std::string& instance,
    const std::function<bool(std::string_view, std::string_view, uint64_t)>& record,
    uint64_t from = 0);
// The instances that have a chain in the database.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> ListPostgresChains(
    const std::string& conninfo);
// Verifies `instance`'s chain and the checkpoint kept for it; the chain's header must name
// `instance` (rows copied from another instance's chain are found).
VerifyReport VerifyPostgresChain(const std::string& conninfo, const std::string& instance,
                                 std::vector<signing::PublicKey> keys, VerifyOptions options = {});

}  // namespace pillar::audit
