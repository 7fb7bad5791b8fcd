// The one interface to pillar's shared state. The embedded default is SQLite (one file, 0600);
// Redis and PostgreSQL implementations serve many instances later. It holds the API keys and
// the usage of quotas, and high-water marks. The schema is in docs/formats/api_keys.md.
//
//   std::unique_ptr<StateStore> store = *OpenSqliteStateStore("/var/lib/pillar/state.db");
//   PILLAR_RETURN_IF_ERROR(store->PutKey(record));
// Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <map>
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
  // Lifecycle and identity (schema 2).
  std::string owner;  // the person or system responsible for the key
  std::string tenant;
  std::vector<std::string> roles;
  std::map<std::string, std::vector<std::string>> attributes;
  std::optional<int64_t> expires_us;
  std::optional<int64_t> last_used_us;
  std::string replaced_by;  // the key that a rotation made to succeed this one
};

// Usage of one quota counter in one period (the limiter's embedded persistence).
struct QuotaUsage {
  std::string counter;       // "<limit name>|<subject>"
  int64_t period_start = 0;  // Unix seconds, start of the UTC day or month
  int64_t used = 0;
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
  // Adds `successor` and makes `id` expire at `old_expires_us` (or earlier, if it already
  // did), in one transaction. NotFound for an unknown id, FailedPrecondition for a revoked one.
  [[nodiscard]] virtual absl::Status RotateKey(const std::string& id, const ApiKeyRecord& successor,
                                               int64_t old_expires_us) = 0;
  // Records last-used times (never moving one backwards). Does not change the generation:
  // it is bookkeeping, not a change of who may call.
  [[nodiscard]] virtual absl::Status TouchKeys(
      const std::vector<std::pair<std::string, int64_t>>& last_used) = 0;

  // Quota usage: adds deltas (creating counters), and reads the counters of periods that
  // started at or after `since`.
  [[nodiscard]] virtual absl::Status AddQuotaUsage(const std::vector<QuotaUsage>& deltas) = 0;
  [[nodiscard]] virtual absl::StatusOr<std::vector<QuotaUsage>> LoadQuotaUsage(int64_t since) = 0;

  // High-water marks: stores max(stored, value) under `name` in one step and returns it, so a
  // caller learns at once whether it is behind (a replayed alias file). Never moves backwards.
  [[nodiscard]] virtual absl::StatusOr<int64_t> RaiseHighWater(const std::string& name,
                                                               int64_t value) = 0;
};

// Opens (creating when absent) the SQLite state file with mode 0600.
[[nodiscard]] absl::StatusOr<std::unique_ptr<StateStore>> OpenSqliteStateStore(
    const std::string& path);

}  // namespace pillar::state
