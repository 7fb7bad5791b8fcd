// Small helpers over the SQLite C API shared by the state store's tables: a prepared statement
// that finalizes itself, column readers, and statements run for their effect. Callers hold the
// store's mutex; nothing here locks.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "common/strings.h"

namespace pillar::state {

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
  // For a statement kept between uses: back to its start, its bindings cleared.
  void Reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

  // Binds by 1-based index; text and blobs are copied.
  void Bind(int index, std::string_view text) {
    sqlite3_bind_text(stmt_, index, text.data(), int(text.size()), SQLITE_TRANSIENT);
  }
  void BindBlob(int index, std::string_view bytes) {
    sqlite3_bind_blob(stmt_, index, bytes.data(), int(bytes.size()), SQLITE_TRANSIENT);
  }
  void Bind(int index, int64_t value) { sqlite3_bind_int64(stmt_, index, value); }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
};

inline std::string ColumnText(sqlite3_stmt* stmt, int column) {
  const unsigned char* text = sqlite3_column_text(stmt, column);
  return text ? std::string(reinterpret_cast<const char*>(text),
                            size_t(sqlite3_column_bytes(stmt, column)))
              : std::string();
}

inline std::string ColumnBlob(sqlite3_stmt* stmt, int column) {
  const void* bytes = sqlite3_column_blob(stmt, column);
  return bytes ? std::string(static_cast<const char*>(bytes),
                             size_t(sqlite3_column_bytes(stmt, column)))
               : std::string();
}

inline std::optional<int64_t> ColumnOptionalInt(sqlite3_stmt* stmt, int column) {
  if (sqlite3_column_type(stmt, column) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_int64(stmt, column);
}

[[nodiscard]] inline absl::Status SqliteError(sqlite3* db, std::string_view what) {
  return absl::InternalError(StrCat("sqlite: ", what, ": ", sqlite3_errmsg(db)));
}

[[nodiscard]] inline absl::Status SqliteExec(sqlite3* db, const char* sql) {
  char* message = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    absl::Status s = absl::InternalError(StrCat("sqlite: ", message ? message : "error"));
    sqlite3_free(message);
    return s;
  }
  return absl::OkStatus();
}

}  // namespace pillar::state
