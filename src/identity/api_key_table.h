// Verifies API keys against a cached snapshot of the key table. A key is 256 random bits, so
// one SHA-256 of the presented secret, looked up by the key's public id, is the right cost:
// password hashing would add milliseconds and no security (docs/security.md).
//
//   ApiKeyTable keys(store, {.refresh_interval = absl::Milliseconds(200)});
//   PILLAR_RETURN_IF_ERROR(keys.Refresh());
//   absl::StatusOr<std::shared_ptr<const Principal>> who = keys.Verify(key_text, now_us);
// The snapshot is reloaded when the store's generation changes (a key created, rotated or
// revoked by the CLI in another process), checked every `refresh_interval` by a background
// thread, which also writes last-used times back every `touch_interval`. Verify() is
// thread-safe and takes a shared lock only to copy a pointer.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/wakeup.h"
#include "identity/principal.h"
#include "state/state_store.h"

namespace pillar::identity {

struct ApiKeyTableOptions {
  absl::Duration refresh_interval = absl::Milliseconds(200);  // zero: no background thread
  absl::Duration touch_interval = absl::Seconds(10);
  // When last-used times fall due to be written back. The background thread still wakes on
  // real time (every refresh_interval); at each wake it asks this clock whether a flush is due.
  const Clock* clock = &SystemClock();
};

class ApiKeyTable {
 public:
  // `store` must outlive the table.
  ApiKeyTable(state::StateStore& store, ApiKeyTableOptions options);
  ~ApiKeyTable();
  ApiKeyTable(const ApiKeyTable&) = delete;
  ApiKeyTable& operator=(const ApiKeyTable&) = delete;

  // Loads the key table now; the first call must succeed before serving.
  [[nodiscard]] absl::Status Refresh();
  // Writes the last-used times gathered since the previous call.
  [[nodiscard]] absl::Status FlushLastUsed();

  // Unauthenticated with a message naming the problem: malformed, unknown, revoked, expired.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const Principal>> Verify(std::string_view key_text,
                                                                        int64_t now_us) const;

  // The principal of key `key_id` while the key is still good at `now_us` (neither revoked nor
  // expired), without its secret: for work that a verified request left to run later (an
  // asynchronous job), so that revoking the key stops that work too.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const Principal>> Current(std::string_view key_id,
                                                                         int64_t now_us) const;

  size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<const Principal> principal;
    std::string secret_hash;
    bool revoked = false;
    int64_t expires_us = 0;  // 0: never
    // Survives snapshot reloads, so no use is lost between flushes.
    std::shared_ptr<std::atomic<int64_t>> last_used_us;
  };
  using Table = absl::flat_hash_map<std::string, Entry>;

  void BackgroundLoop();

  state::StateStore& store_;
  const ApiKeyTableOptions options_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const Table> table_ ABSL_GUARDED_BY(mu_);
  int64_t generation_ ABSL_GUARDED_BY(mu_) = -1;
  Wakeup wakeup_;         // the refresh thread sleeps on it, not on mu_ (common/wakeup.h says why)
  absl::Mutex flush_mu_;  // serializes FlushLastUsed
  absl::flat_hash_map<std::string, int64_t> flushed_ ABSL_GUARDED_BY(flush_mu_);
  std::thread background_;
};

}  // namespace pillar::identity
