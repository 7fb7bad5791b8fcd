#include "identity/authenticator.h"

#include <cstdio>

#include "common/crypto.h"
#include "common/strings.h"
#include "identity/api_key.h"

namespace pillar::identity {

Authenticator::Authenticator(state::StateStore& store, absl::Duration refresh_interval)
    : store_(store), refresh_interval_(refresh_interval), table_(std::make_shared<Table>()) {
  if (refresh_interval_ > absl::ZeroDuration()) refresher_ = std::thread([this] { RefreshLoop(); });
}

Authenticator::~Authenticator() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (refresher_.joinable()) refresher_.join();
}

absl::Status Authenticator::Refresh() {
  absl::StatusOr<int64_t> generation = store_.KeysGeneration();
  if (!generation.ok()) return generation.status();
  {
    absl::MutexLock lock(&mu_);
    if (*generation == generation_) return absl::OkStatus();
  }
  absl::StatusOr<std::vector<state::ApiKeyRecord>> keys = store_.ListKeys();
  if (!keys.ok()) return keys.status();
  auto table = std::make_shared<Table>();
  for (state::ApiKeyRecord& key : *keys) {
    (*table)[key.id] =
        Entry{std::move(key.name), std::move(key.secret_hash), key.revoked_us.has_value()};
  }
  absl::MutexLock lock(&mu_);
  table_ = std::move(table);
  generation_ = *generation;
  return absl::OkStatus();
}

void Authenticator::RefreshLoop() {
  std::string last_error;  // logged once per distinct error, not every interval
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), refresh_interval_);
    if (stopping_) break;
    mu_.Unlock();
    absl::Status s = Refresh();
    if (!s.ok() && s.ToString() != last_error) {
      // Keep serving the last good table; a transient store error must not lock everyone out.
      last_error = s.ToString();
      std::fprintf(stderr, "pillar: key table refresh failed (serving the last good table): %s\n",
                   last_error.c_str());
    } else if (s.ok() && !last_error.empty()) {
      last_error.clear();
      std::fprintf(stderr, "pillar: key table refresh works again\n");
    }
    mu_.Lock();
  }
}

absl::StatusOr<Principal> Authenticator::Authenticate(std::string_view authorization) const {
  if (authorization.empty()) return absl::UnauthenticatedError("missing Authorization header");
  constexpr std::string_view kBearer = "bearer ";
  if (authorization.size() <= kBearer.size() ||
      !EqualsIgnoreCase(authorization.substr(0, kBearer.size()), kBearer)) {
    return absl::UnauthenticatedError("Authorization header must be 'Bearer <api key>'");
  }
  absl::StatusOr<ParsedApiKey> key = ParseApiKey(authorization.substr(kBearer.size()));
  if (!key.ok()) return absl::UnauthenticatedError("malformed API key");
  std::shared_ptr<const Table> table;
  {
    absl::ReaderMutexLock lock(&mu_);
    table = table_;
  }
  auto it = table->find(ToAbsl(key->id));
  // Hash even when the id is unknown, so timing does not tell which ids exist.
  std::string hash = HashApiKeySecret(key->secret);
  if (it == table->end() || !ConstantTimeEquals(hash, it->second.secret_hash)) {
    return absl::UnauthenticatedError("unknown API key");
  }
  if (it->second.revoked) return absl::UnauthenticatedError("API key revoked");
  return Principal{it->first, it->second.name};
}

}  // namespace pillar::identity
