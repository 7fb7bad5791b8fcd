// The `jobs` table of the SQLite state store (schema 4, docs/formats/api_keys.md): the
// asynchronous-job methods of StateStore, each one transaction. The store owns the connection
// and calls these with its mutex held.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "state/sqlite_util.h"
#include "state/state_store.h"

namespace pillar::state {

class SqliteJobTable {
 public:
  explicit SqliteJobTable(sqlite3* db) : db_(db) {}

  [[nodiscard]] absl::Status Put(const JobRecord& job, const JobQuota& quota);
  // With `owners`, only a job one of them submitted (StateStore::GetOwnedJob).
  [[nodiscard]] absl::StatusOr<JobRecord> Get(const std::string& id,
                                              const std::vector<std::string>* owners);
  [[nodiscard]] absl::StatusOr<int64_t> ResultBytes(const std::string& id,
                                                    const std::vector<std::string>& owners);
  [[nodiscard]] absl::StatusOr<std::vector<JobRecord>> Claim(int64_t now_us, int64_t lease_until_us,
                                                             int limit);
  [[nodiscard]] absl::Status Renew(const std::vector<std::pair<std::string, int64_t>>& claims,
                                   int64_t lease_until_us);
  [[nodiscard]] absl::StatusOr<bool> EndRun(const JobRecord& job, int64_t max_owner_bytes);
  [[nodiscard]] absl::StatusOr<int64_t> DeleteExpired(int64_t now_us);
  [[nodiscard]] absl::StatusOr<std::vector<JobCount>> Count();

 private:
  [[nodiscard]] absl::Status Rollback(absl::Status status);
  // The UPDATE that ends a run (EndRun), with `result` as the stored body.
  [[nodiscard]] absl::StatusOr<bool> Update(const JobRecord& job, std::string_view result);
  // Jobs running under a live lease, by owner.
  [[nodiscard]] absl::StatusOr<std::map<std::string, int64_t>> RunningByOwner(int64_t now_us);

  sqlite3* db_;
  // The claim's two queries, prepared at their first use and kept (the connection must be closed
  // with sqlite3_close_v2, which waits for them): the job queue claims every poll_ms, and
  // preparing them again each time (SQLite's parser and planner) was nearly all of an idle
  // server's job-queue CPU.
  std::optional<Statement> candidates_;
  std::optional<Statement> running_;
};

}  // namespace pillar::state
