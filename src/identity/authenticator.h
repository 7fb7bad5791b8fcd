// Checks `Authorization: Bearer <api key>` against a cached snapshot of the key table. The
// snapshot is reloaded when the store's generation changes (a key created or revoked by the CLI
// in another process), checked every `refresh_interval` by a background thread.
//
//   Authenticator auth(store, absl::Milliseconds(200));
//   absl::StatusOr<Principal> who = auth.Authenticate(header_value);
// Authenticate() is thread-safe and takes a shared lock only to copy a pointer.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "state/state_store.h"

namespace pillar::identity {

struct Principal {
  std::string key_id;
  std::string key_name;
};

class Authenticator {
 public:
  // `store` must outlive the authenticator. A zero interval disables background refresh.
  Authenticator(state::StateStore& store, absl::Duration refresh_interval);
  ~Authenticator();
  Authenticator(const Authenticator&) = delete;
  Authenticator& operator=(const Authenticator&) = delete;

  // Loads the key table now; the first call must succeed before serving.
  [[nodiscard]] absl::Status Refresh();

  // Unauthenticated with a message naming the problem: missing, malformed, unknown, revoked.
  absl::StatusOr<Principal> Authenticate(std::string_view authorization) const;

 private:
  struct Entry {
    std::string name;
    std::string secret_hash;
    bool revoked;
  };
  using Table = absl::flat_hash_map<std::string, Entry>;

  void RefreshLoop();

  state::StateStore& store_;
  absl::Duration refresh_interval_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const Table> table_ ABSL_GUARDED_BY(mu_);
  int64_t generation_ ABSL_GUARDED_BY(mu_) = -1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread refresher_;
};

}  // namespace pillar::identity
