// The one interface to pillar's shared state. The embedded default is SQLite (one file, 0600);
// Redis and PostgreSQL implementations serve many instances later. This state is the
// API key table.
//
//   std::unique_ptr<StateStore> store = *OpenSqliteStateStore("/var/lib/pillar/state.db");
//   PILLAR_RETURN_IF_ERROR(store->PutKey(record));
// Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pillar::state {

struct ApiKeyRecord {
  std::string id;           // public identifier, part of the key text
  std::string name;         // what the operator called it
  std::string secret_hash;  // SHA-256 of the secret; the secret itself is never stored
  int64_t created_us = 0;   // Unix microseconds
  std::optional<int64_t> revoked_us;
};

class StateStore {
 public:
  virtual ~StateStore() = default;

  // AlreadyExists when the id is taken.
  [[nodiscard]] virtual absl::Status PutKey(const ApiKeyRecord& record) = 0;
  [[nodiscard]] virtual absl::StatusOr<std::vector<ApiKeyRecord>> ListKeys() = 0;
  // NotFound for an unknown id; revoking twice keeps the first time.
  [[nodiscard]] virtual absl::Status RevokeKey(const std::string& id, int64_t revoked_us) = 0;
  // A number that changes whenever any process changes the keys, so caches know to reload.
  [[nodiscard]] virtual absl::StatusOr<int64_t> KeysGeneration() = 0;
};

// Opens (creating when absent) the SQLite state file with mode 0600.
absl::StatusOr<std::unique_ptr<StateStore>> OpenSqliteStateStore(const std::string& path);

}  // namespace pillar::state
