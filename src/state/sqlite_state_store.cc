// SQLite implementation of StateStore. One connection guarded by a mutex: key operations are
// rare (the data plane reads a cached snapshot), so simplicity wins over pooling.
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/synchronization/mutex.h"
#include "common/strings.h"
#include "state/state_store.h"

namespace pillar::state {
namespace {

constexpr const char* kSchema = R"sql(
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

class Statement {
 public:
  Statement(sqlite3* db, const char* sql) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return stmt_; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
};

class SqliteStateStore final : public StateStore {
 public:
  explicit SqliteStateStore(sqlite3* db) : db_(db) {}
  ~SqliteStateStore() override { sqlite3_close(db_); }

  absl::Status Init() {
    absl::MutexLock lock(&mu_);
    sqlite3_busy_timeout(db_, 5000);
    if (absl::Status s = Exec("PRAGMA journal_mode=WAL"); !s.ok()) return s;
    return Exec(kSchema);
  }

  absl::Status PutKey(const ApiKeyRecord& record) override {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
    Statement insert(
        db_, "INSERT INTO api_keys (id, name, secret_hash, created_us) VALUES (?, ?, ?, ?)");
    if (!insert.ok()) return Rollback(Error("prepare insert"));
    sqlite3_bind_text(insert.get(), 1, record.id.data(), int(record.id.size()), SQLITE_TRANSIENT);
    sqlite3_bind_text(insert.get(), 2, record.name.data(), int(record.name.size()),
                      SQLITE_TRANSIENT);
    sqlite3_bind_blob(insert.get(), 3, record.secret_hash.data(), int(record.secret_hash.size()),
                      SQLITE_TRANSIENT);
    sqlite3_bind_int64(insert.get(), 4, record.created_us);
    int rc = sqlite3_step(insert.get());
    if (rc == SQLITE_CONSTRAINT) {
      return Rollback(absl::AlreadyExistsError(StrCat("key id ", record.id, " exists")));
    }
    if (rc != SQLITE_DONE) return Rollback(Error("insert key"));
    return BumpAndCommit();
  }

  absl::StatusOr<std::vector<ApiKeyRecord>> ListKeys() override {
    absl::MutexLock lock(&mu_);
    Statement select(db_,
                     "SELECT id, name, secret_hash, created_us, revoked_us FROM api_keys ORDER BY "
                     "created_us, id");
    if (!select.ok()) return Error("prepare select");
    std::vector<ApiKeyRecord> keys;
    int rc;
    while ((rc = sqlite3_step(select.get())) == SQLITE_ROW) {
      ApiKeyRecord r;
      r.id = Text(select.get(), 0);
      r.name = Text(select.get(), 1);
      r.secret_hash.assign(static_cast<const char*>(sqlite3_column_blob(select.get(), 2)),
                           size_t(sqlite3_column_bytes(select.get(), 2)));
      r.created_us = sqlite3_column_int64(select.get(), 3);
      if (sqlite3_column_type(select.get(), 4) != SQLITE_NULL) {
        r.revoked_us = sqlite3_column_int64(select.get(), 4);
      }
      keys.push_back(std::move(r));
    }
    if (rc != SQLITE_DONE) return Error("list keys");
    return keys;
  }

  absl::Status RevokeKey(const std::string& id, int64_t revoked_us) override {
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

  absl::StatusOr<int64_t> KeysGeneration() override {
    absl::MutexLock lock(&mu_);
    Statement select(db_, "SELECT value FROM meta WHERE key = 'keys_generation'");
    if (!select.ok() || sqlite3_step(select.get()) != SQLITE_ROW) return Error("read generation");
    return sqlite3_column_int64(select.get(), 0);
  }

 private:
  static std::string Text(sqlite3_stmt* stmt, int column) {
    const unsigned char* text = sqlite3_column_text(stmt, column);
    return text ? std::string(reinterpret_cast<const char*>(text),
                              size_t(sqlite3_column_bytes(stmt, column)))
                : std::string();
  }

  absl::Status Error(std::string_view what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return absl::InternalError(StrCat("sqlite: ", what, ": ", sqlite3_errmsg(db_)));
  }

  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    char* message = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
      absl::Status s = absl::InternalError(StrCat("sqlite: ", message ? message : "error"));
      sqlite3_free(message);
      return s;
    }
    return absl::OkStatus();
  }

  absl::Status Rollback(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    (void)Exec("ROLLBACK");
    return status;
  }

  absl::Status BumpAndCommit() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (absl::Status s = Exec("UPDATE meta SET value = value + 1 WHERE key = 'keys_generation'");
        !s.ok()) {
      return Rollback(s);
    }
    return Exec("COMMIT");
  }

  absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<StateStore>> OpenSqliteStateStore(const std::string& path) {
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
