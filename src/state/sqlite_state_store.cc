// SQLite implementation of StateStore. One connection guarded by a mutex: key operations are
// rare (the data plane reads a cached snapshot), so simplicity wins over pooling.
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/synchronization/mutex.h"
#include "common/strings.h"
#include "state/sqlite_job_table.h"
#include "state/sqlite_util.h"
#include "state/state_store.h"

namespace pillar::state {
namespace {

// Schema 1 (issue 2) is created as it was, then migrated forward step by step, so a state file
// from any earlier pillar opens in place.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', 1), ('keys_generation', 0);
CREATE TABLE IF NOT EXISTS api_keys (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  secret_hash BLOB NOT NULL,
  created_us INTEGER NOT NULL,
  revoked_us INTEGER
);
)sql";

constexpr const char* kMigrateToV2 = R"sql(
ALTER TABLE api_keys ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN roles TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN attributes TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN expires_us INTEGER;
ALTER TABLE api_keys ADD COLUMN last_used_us INTEGER;
ALTER TABLE api_keys ADD COLUMN replaced_by TEXT NOT NULL DEFAULT '';
CREATE TABLE quota_usage (
  counter TEXT NOT NULL,
  period_start INTEGER NOT NULL,
  used INTEGER NOT NULL,
  PRIMARY KEY (counter, period_start)
);
UPDATE meta SET value = 2 WHERE key = 'schema_version';
)sql";

// Schema 3: high-water marks (signed alias files' generations), so a replayed older file is
// refused across restarts.
constexpr const char* kMigrateToV3 = R"sql(
CREATE TABLE high_water (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
UPDATE meta SET value = 3 WHERE key = 'schema_version';
)sql";

// Schema 4: asynchronous jobs. The table is the queue: `state` and the two times say which jobs
// may be claimed, `attempts` names the claim that may end a run.
constexpr const char* kMigrateToV4 = R"sql(
CREATE TABLE jobs (
  id TEXT PRIMARY KEY,
  owner TEXT NOT NULL,
  principal TEXT NOT NULL,
  model TEXT NOT NULL,
  version TEXT NOT NULL,
  request BLOB NOT NULL,
  priority TEXT NOT NULL,
  idempotent INTEGER NOT NULL,
  state TEXT NOT NULL,
  created_us INTEGER NOT NULL,
  updated_us INTEGER NOT NULL,
  not_before_us INTEGER NOT NULL,
  lease_until_us INTEGER NOT NULL,
  attempts INTEGER NOT NULL,
  expires_us INTEGER NOT NULL,
  status INTEGER NOT NULL,
  content_type TEXT NOT NULL,
  headers TEXT NOT NULL,
  result BLOB NOT NULL
);
CREATE INDEX jobs_by_state ON jobs (state, created_us, id);
CREATE INDEX jobs_by_owner ON jobs (owner, state);
UPDATE meta SET value = 4 WHERE key = 'schema_version';
)sql";

constexpr int64_t kSchemaVersion = 4;

// Roles: "a,b". Attributes: "name=v1,v2;name2=v3". The key CLI refuses names and values that
// hold the separators, so the encoding is unambiguous.
std::string JoinList(const std::vector<std::string>& values) {
  std::string out;
  for (const std::string& v : values) StrAppend(&out, out.empty() ? "" : ",", v);
  return out;
}

std::vector<std::string> SplitList(std::string_view text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  for (std::string_view part : Split(text, ',')) out.emplace_back(part);
  return out;
}

std::string EncodeAttributes(const std::map<std::string, std::vector<std::string>>& attributes) {
  std::string out;
  for (const auto& [name, values] : attributes) {
    StrAppend(&out, out.empty() ? "" : ";", name, "=", JoinList(values));
  }
  return out;
}

std::map<std::string, std::vector<std::string>> DecodeAttributes(std::string_view text) {
  std::map<std::string, std::vector<std::string>> out;
  if (text.empty()) return out;
  for (std::string_view item : Split(text, ';')) {
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) continue;
    out[std::string(item.substr(0, eq))] = SplitList(item.substr(eq + 1));
  }
  return out;
}

class SqliteStateStore final : public StateStore {
 public:
  explicit SqliteStateStore(sqlite3* db) : db_(db), jobs_(db) {}
  // close_v2: the job table keeps prepared statements, finalized when it is destroyed after
  // this body; the connection closes then (sqlite3_close would refuse, and leak it).
  ~SqliteStateStore() override { sqlite3_close_v2(db_); }

  [[nodiscard]] absl::Status Init() {
    absl::MutexLock lock(&mu_);
    sqlite3_busy_timeout(db_, 5000);
    if (absl::Status s = Exec("PRAGMA journal_mode=WAL"); !s.ok()) return s;
    if (absl::Status s = Exec(kSchemaV1); !s.ok()) return s;
    Statement select(db_, "SELECT value FROM meta WHERE key = 'schema_version'");
    if (!select.ok() || sqlite3_step(select.get()) != SQLITE_ROW) return Error("read schema");
    const int64_t version = sqlite3_column_int64(select.get(), 0);
    if (version > kSchemaVersion) {
      return absl::FailedPreconditionError(
          StrCat("state file has schema ", version, "; this pillar knows up to ", kSchemaVersion));
    }
    if (version == kSchemaVersion) return absl::OkStatus();
    if (absl::Status s = Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
    if (version < 2) {
      if (absl::Status s = Exec(kMigrateToV2); !s.ok()) return Rollback(s);
    }
    if (version < 3) {
      if (absl::Status s = Exec(kMigrateToV3); !s.ok()) return Rollback(s);
    }
    if (absl::Status s = Exec(kMigrateToV4); !s.ok()) return Rollback(s);
    return Exec("COMMIT");
  }

  [[nodiscard]] absl::StatusOr<int64_t> RaiseHighWater(const std::string& name,
                                                       int64_t value) override {
    absl::MutexLock lock(&mu_);
    Statement upsert(db_,
                     "INSERT INTO high_water (name, value) VALUES (?, ?) ON CONFLICT (name) "
                     "DO UPDATE SET value = max(value, excluded.value) RETURNING value");
    if (!upsert.ok()) return Error("prepare high-water upsert");
    sqlite3_bind_text(upsert.get(), 1, name.data(), int(name.size()), SQLITE_TRANSIENT);
    sqlite3_bind_int64(upsert.get(), 2, value);
    if (sqlite3_step(upsert.get()) != SQLITE_ROW) return Error("high-water upsert");
    const int64_t stored = sqlite3_column_int64(upsert.get(), 0);
    if (sqlite3_step(upsert.get()) != SQLITE_DONE) return Error("high-water upsert");
    return stored;
  }

  [[nodiscard]] absl::Status PutKey(const ApiKeyRecord& record) override {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
    if (absl::Status s = Insert(record); !s.ok()) return Rollback(s);
    return BumpAndCommit();
  }

  [[nodiscard]] absl::StatusOr<std::vector<ApiKeyRecord>> ListKeys() override {
    absl::MutexLock lock(&mu_);
    Statement select(db_,
                     "SELECT id, name, secret_hash, created_us, revoked_us, owner, tenant, roles, "
                     "attributes, expires_us, last_used_us, replaced_by FROM api_keys ORDER BY "
                     "created_us, id");
    if (!select.ok()) return Error("prepare select");
    std::vector<ApiKeyRecord> keys;
    int rc;
    sqlite3_stmt* st = select.get();
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
      ApiKeyRecord r;
      r.id = Text(st, 0);
      r.name = Text(st, 1);
      r.secret_hash.assign(static_cast<const char*>(sqlite3_column_blob(st, 2)),
                           size_t(sqlite3_column_bytes(st, 2)));
      r.created_us = sqlite3_column_int64(st, 3);
      r.revoked_us = OptionalInt(st, 4);
      r.owner = Text(st, 5);
      r.tenant = Text(st, 6);
      r.roles = SplitList(Text(st, 7));
      r.attributes = DecodeAttributes(Text(st, 8));
      r.expires_us = OptionalInt(st, 9);
      r.last_used_us = OptionalInt(st, 10);
      r.replaced_by = Text(st, 11);
      keys.push_back(std::move(r));
    }
    if (rc != SQLITE_DONE) return Error("list keys");
    return keys;
  }

  // The last key not revoked in the chain of successors after `id` (replaced_by, followed at
  // most 64 steps, so that a cycle written by hand ends); empty when every one is revoked.
  [[nodiscard]] absl::StatusOr<std::string> LiveSuccessor(const std::string& id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Statement chain(db_,
                    "WITH RECURSIVE after(id, depth) AS ("
                    " SELECT replaced_by, 1 FROM api_keys WHERE id = ?1 AND replaced_by <> ''"
                    " UNION ALL SELECT k.replaced_by, a.depth + 1 FROM api_keys k"
                    " JOIN after a ON k.id = a.id WHERE k.replaced_by <> '' AND a.depth < 64)"
                    " SELECT a.id FROM after a JOIN api_keys k ON k.id = a.id"
                    " WHERE k.revoked_us IS NULL ORDER BY a.depth DESC LIMIT 1");
    if (!chain.ok()) return Error("prepare rotate chain");
    sqlite3_bind_text(chain.get(), 1, id.data(), int(id.size()), SQLITE_TRANSIENT);
    const int rc = sqlite3_step(chain.get());
    if (rc == SQLITE_ROW) return ColumnText(chain.get(), 0);
    if (rc != SQLITE_DONE) return Error("rotate chain");
    return std::string();
  }

  [[nodiscard]] absl::Status RotateKey(const std::string& id, const ApiKeyRecord& successor,
                                       int64_t old_expires_us) override {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
    Statement select(db_, "SELECT revoked_us, replaced_by FROM api_keys WHERE id = ?");
    if (!select.ok()) return Rollback(Error("prepare rotate"));
    sqlite3_bind_text(select.get(), 1, id.data(), int(id.size()), SQLITE_TRANSIENT);
    if (sqlite3_step(select.get()) != SQLITE_ROW) {
      return Rollback(absl::NotFoundError(StrCat("no key with id ", id)));
    }
    if (sqlite3_column_type(select.get(), 0) != SQLITE_NULL) {
      return Rollback(absl::FailedPreconditionError(StrCat("key ", id, " is revoked")));
    }
    // Once: a key has one successor, which owns what it owned (its jobs). A second rotation
    // took them from the first successor, the key in use (review helper-134); unless every key
    // after it is revoked, when a new successor is what takes their place (review helper-136:
    // the chain could not be taken up again, and the key's jobs were lost with its overlap; and
    // helper-137: a live key two rotations on lost them to the new successor).
    if (!ColumnText(select.get(), 1).empty()) {
      absl::StatusOr<std::string> live = LiveSuccessor(id);
      if (!live.ok()) return Rollback(live.status());
      if (!live->empty()) {
        return Rollback(
            absl::FailedPreconditionError(StrCat("key ", id, " was rotated already; ", *live,
                                                 " is its live successor: rotate that one")));
      }
    }
    if (absl::Status s = Insert(successor); !s.ok()) return Rollback(s);
    Statement update(db_,
                     "UPDATE api_keys SET expires_us = MIN(COALESCE(expires_us, ?1), ?1), "
                     "replaced_by = ?2 WHERE id = ?3");
    if (!update.ok()) return Rollback(Error("prepare rotate update"));
    sqlite3_bind_int64(update.get(), 1, old_expires_us);
    sqlite3_bind_text(update.get(), 2, successor.id.data(), int(successor.id.size()),
                      SQLITE_TRANSIENT);
    sqlite3_bind_text(update.get(), 3, id.data(), int(id.size()), SQLITE_TRANSIENT);
    if (sqlite3_step(update.get()) != SQLITE_DONE) return Rollback(Error("rotate key"));
    return BumpAndCommit();
  }

  [[nodiscard]] absl::Status TouchKeys(
      const std::vector<std::pair<std::string, int64_t>>& last_used) override {
    if (last_used.empty()) return absl::OkStatus();
    absl::MutexLock lock(&mu_);
    if (absl::Status s = Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
    Statement update(db_,
                     "UPDATE api_keys SET last_used_us = MAX(COALESCE(last_used_us, 0), ?) "
                     "WHERE id = ?");
    if (!update.ok()) return Rollback(Error("prepare touch"));
    for (const auto& [id, time_us] : last_used) {
      sqlite3_reset(update.get());
      sqlite3_bind_int64(update.get(), 1, time_us);
      sqlite3_bind_text(update.get(), 2, id.data(), int(id.size()), SQLITE_TRANSIENT);
      if (sqlite3_step(update.get()) != SQLITE_DONE) return Rollback(Error("touch key"));
    }
    return Exec("COMMIT");
  }

  [[nodiscard]] absl::Status AddQuotaUsage(const std::vector<QuotaUsage>& deltas) override {
    if (deltas.empty()) return absl::OkStatus();
    absl::MutexLock lock(&mu_);
    if (absl::Status s = Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
    Statement upsert(
        db_,
        "INSERT INTO quota_usage (counter, period_start, used) VALUES (?, ?, ?) "
        "ON CONFLICT (counter, period_start) DO UPDATE SET used = used + excluded.used");
    if (!upsert.ok()) return Rollback(Error("prepare quota upsert"));
    for (const QuotaUsage& d : deltas) {
      sqlite3_reset(upsert.get());
      sqlite3_bind_text(upsert.get(), 1, d.counter.data(), int(d.counter.size()), SQLITE_TRANSIENT);
      sqlite3_bind_int64(upsert.get(), 2, d.period_start);
      sqlite3_bind_int64(upsert.get(), 3, d.used);
      if (sqlite3_step(upsert.get()) != SQLITE_DONE) return Rollback(Error("quota upsert"));
    }
    return Exec("COMMIT");
  }

  [[nodiscard]] absl::StatusOr<std::vector<QuotaUsage>> LoadQuotaUsage(int64_t since) override {
    absl::MutexLock lock(&mu_);
    Statement select(db_,
                     "SELECT counter, period_start, used FROM quota_usage WHERE period_start >= ?");
    if (!select.ok()) return Error("prepare quota select");
    sqlite3_bind_int64(select.get(), 1, since);
    std::vector<QuotaUsage> out;
    int rc;
    while ((rc = sqlite3_step(select.get())) == SQLITE_ROW) {
      out.push_back({Text(select.get(), 0), sqlite3_column_int64(select.get(), 1),
                     sqlite3_column_int64(select.get(), 2)});
    }
    if (rc != SQLITE_DONE) return Error("quota select");
    return out;
  }

  [[nodiscard]] absl::Status RevokeKey(const std::string& id, int64_t revoked_us) override {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
    Statement update(db_, "UPDATE api_keys SET revoked_us = COALESCE(revoked_us, ?) WHERE id = ?");
    if (!update.ok()) return Rollback(Error("prepare revoke"));
    sqlite3_bind_int64(update.get(), 1, revoked_us);
    sqlite3_bind_text(update.get(), 2, id.data(), int(id.size()), SQLITE_TRANSIENT);
    if (sqlite3_step(update.get()) != SQLITE_DONE) return Rollback(Error("revoke key"));
    if (sqlite3_changes(db_) == 0)
      return Rollback(absl::NotFoundError(StrCat("no key with id ", id)));
    return BumpAndCommit();
  }

  [[nodiscard]] absl::Status PutJob(const JobRecord& job, const JobQuota& quota) override {
    absl::MutexLock lock(&mu_);
    return jobs_.Put(job, quota);
  }

  [[nodiscard]] absl::StatusOr<JobRecord> GetJob(const std::string& id) override {
    absl::MutexLock lock(&mu_);
    return jobs_.Get(id, nullptr);
  }

  [[nodiscard]] absl::StatusOr<JobRecord> GetOwnedJob(
      const std::string& id, const std::vector<std::string>& owners) override {
    absl::MutexLock lock(&mu_);
    return jobs_.Get(id, &owners);
  }

  [[nodiscard]] absl::StatusOr<int64_t> OwnedJobResultBytes(
      const std::string& id, const std::vector<std::string>& owners) override {
    absl::MutexLock lock(&mu_);
    return jobs_.ResultBytes(id, owners);
  }

  [[nodiscard]] absl::StatusOr<std::vector<JobRecord>> ClaimJobs(int64_t now_us,
                                                                 int64_t lease_until_us,
                                                                 int limit) override {
    absl::MutexLock lock(&mu_);
    return jobs_.Claim(now_us, lease_until_us, limit);
  }

  [[nodiscard]] absl::Status RenewJobs(const std::vector<std::pair<std::string, int64_t>>& claims,
                                       int64_t lease_until_us) override {
    absl::MutexLock lock(&mu_);
    return jobs_.Renew(claims, lease_until_us);
  }

  [[nodiscard]] absl::StatusOr<bool> EndJobRun(const JobRecord& job,
                                               int64_t max_owner_bytes) override {
    absl::MutexLock lock(&mu_);
    return jobs_.EndRun(job, max_owner_bytes);
  }

  [[nodiscard]] absl::StatusOr<int64_t> DeleteExpiredJobs(int64_t now_us) override {
    absl::MutexLock lock(&mu_);
    return jobs_.DeleteExpired(now_us);
  }

  [[nodiscard]] absl::StatusOr<std::vector<JobCount>> CountJobs() override {
    absl::MutexLock lock(&mu_);
    return jobs_.Count();
  }

  [[nodiscard]] absl::StatusOr<int64_t> KeysGeneration() override {
    absl::MutexLock lock(&mu_);
    Statement select(db_, "SELECT value FROM meta WHERE key = 'keys_generation'");
    if (!select.ok() || sqlite3_step(select.get()) != SQLITE_ROW) return Error("read generation");
    return sqlite3_column_int64(select.get(), 0);
  }

 private:
  [[nodiscard]] absl::Status Insert(const ApiKeyRecord& record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Statement insert(
        db_,
        "INSERT INTO api_keys (id, name, secret_hash, created_us, owner, tenant, roles, "
        "attributes, expires_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
    if (!insert.ok()) return Error("prepare insert");
    sqlite3_stmt* st = insert.get();
    const std::string roles = JoinList(record.roles);
    const std::string attributes = EncodeAttributes(record.attributes);
    sqlite3_bind_text(st, 1, record.id.data(), int(record.id.size()), SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, record.name.data(), int(record.name.size()), SQLITE_TRANSIENT);
    sqlite3_bind_blob(st, 3, record.secret_hash.data(), int(record.secret_hash.size()),
                      SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, record.created_us);
    sqlite3_bind_text(st, 5, record.owner.data(), int(record.owner.size()), SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 6, record.tenant.data(), int(record.tenant.size()), SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 7, roles.data(), int(roles.size()), SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 8, attributes.data(), int(attributes.size()), SQLITE_TRANSIENT);
    if (record.expires_us) {
      sqlite3_bind_int64(st, 9, *record.expires_us);
    } else {
      sqlite3_bind_null(st, 9);
    }
    int rc = sqlite3_step(st);
    if (rc == SQLITE_CONSTRAINT)
      return absl::AlreadyExistsError(StrCat("key id ", record.id, " exists"));
    if (rc != SQLITE_DONE) return Error("insert key");
    return absl::OkStatus();
  }

  static std::optional<int64_t> OptionalInt(sqlite3_stmt* stmt, int column) {
    return ColumnOptionalInt(stmt, column);
  }

  static std::string Text(sqlite3_stmt* stmt, int column) { return ColumnText(stmt, column); }

  [[nodiscard]] absl::Status Error(std::string_view what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return SqliteError(db_, what);
  }

  [[nodiscard]] absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return SqliteExec(db_, sql);
  }

  [[nodiscard]] absl::Status Rollback(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    (void)Exec("ROLLBACK");
    return status;
  }

  [[nodiscard]] absl::Status BumpAndCommit() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (absl::Status s = Exec("UPDATE meta SET value = value + 1 WHERE key = 'keys_generation'");
        !s.ok()) {
      return Rollback(s);
    }
    return Exec("COMMIT");
  }

  absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
  SqliteJobTable jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kQueued:
      return "queued";
    case JobState::kRunning:
      return "running";
    case JobState::kDone:
      return "done";
    case JobState::kFailed:
      return "failed";
  }
  return "queued";
}

[[nodiscard]] absl::StatusOr<std::unique_ptr<StateStore>> OpenSqliteStateStore(
    const std::string& path) {
  // Create the file 0600 before SQLite does, so key hashes are never world-readable.
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return absl::PermissionDeniedError(StrCat("cannot open state file ", path));
  ::fchmod(fd, 0600);
  ::close(fd);
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, nullptr) !=
      SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::InternalError(StrCat("cannot open state file ", path, ": ", message));
  }
  auto store = std::make_unique<SqliteStateStore>(db);
  if (absl::Status s = store->Init(); !s.ok()) {
    return absl::Status(s.code(), StrCat(path, ": ", s.message()));
  }
  return store;
}

}  // namespace pillar::state
