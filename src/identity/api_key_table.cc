#include "identity/api_key_table.h"

#include <cstdio>
#include <map>

#include "absl/time/clock.h"
#include "common/crypto.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "identity/api_key.h"

namespace pillar::identity {

// Last-used times are kept to this precision, so a busy key does not write the shared atomic on
// every request.
constexpr int64_t kLastUsedPrecisionUs = 1'000'000;
// Rotations a key's succession is followed back through (Principal::succeeds).
constexpr size_t kMaxSucceeded = 64;

ApiKeyTable::ApiKeyTable(state::StateStore& store, ApiKeyTableOptions options)
    : store_(store), options_(options), table_(std::make_shared<Table>()) {
  if (options_.refresh_interval > absl::ZeroDuration()) {
    background_ = std::thread([this] {
      NameThisThread("key-table");
      BackgroundLoop();
    });
  }
}

ApiKeyTable::~ApiKeyTable() {
  wakeup_.Stop();
  if (background_.joinable()) background_.join();
  (void)FlushLastUsed();  // best effort: a failure here only loses bookkeeping
}

size_t ApiKeyTable::size() const {
  absl::ReaderMutexLock lock(&mu_);
  return table_->size();
}

absl::Status ApiKeyTable::Refresh() {
  absl::StatusOr<int64_t> generation = store_.KeysGeneration();
  if (!generation.ok()) return generation.status();
  std::shared_ptr<const Table> old;
  {
    absl::MutexLock lock(&mu_);
    if (*generation == generation_) return absl::OkStatus();
    old = table_;
  }
  absl::StatusOr<std::vector<state::ApiKeyRecord>> keys = store_.ListKeys();
  if (!keys.ok()) return keys.status();
  // Who each key was rotated from: a rotation sets the old key's replaced_by.
  std::map<std::string, std::string> replaced;  // successor id -> the key it replaced
  for (const state::ApiKeyRecord& key : *keys) {
    if (!key.replaced_by.empty()) replaced.emplace(key.replaced_by, key.id);
  }
  auto table = std::make_shared<Table>();
  for (state::ApiKeyRecord& key : *keys) {
    auto principal = std::make_shared<Principal>();
    principal->method = AuthMethod::kApiKey;
    principal->id = StrCat("key:", key.id);
    principal->key_id = key.id;
    principal->tenant = key.tenant;
    principal->roles = key.roles;
    for (auto& [name, values] : key.attributes) principal->attributes[name] = values;
    principal->attributes["owner"] = {key.owner};
    principal->attributes["name"] = {key.name};
    principal->expires_us = key.expires_us.value_or(0);
    // Bounded: a state file edited into a cycle of replacements must not loop.
    for (auto it = replaced.find(key.id);
         it != replaced.end() && principal->succeeds.size() < kMaxSucceeded;
         it = replaced.find(it->second)) {
      principal->succeeds.push_back(StrCat("key:", it->second));
    }
    Entry entry{std::move(principal), std::move(key.secret_hash), key.revoked_us.has_value(),
                key.expires_us.value_or(0), nullptr};
    auto previous = old->find(key.id);
    entry.last_used_us = previous != old->end()
                             ? previous->second.last_used_us
                             : std::make_shared<std::atomic<int64_t>>(key.last_used_us.value_or(0));
    table->emplace(key.id, std::move(entry));
  }
  absl::MutexLock lock(&mu_);
  table_ = std::move(table);
  generation_ = *generation;
  return absl::OkStatus();
}

absl::Status ApiKeyTable::FlushLastUsed() {
  absl::MutexLock flush_lock(&flush_mu_);
  std::shared_ptr<const Table> table;
  {
    absl::ReaderMutexLock lock(&mu_);
    table = table_;
  }
  std::vector<std::pair<std::string, int64_t>> changed;
  for (const auto& [id, entry] : *table) {
    const int64_t used = entry.last_used_us->load(std::memory_order_relaxed);
    auto it = flushed_.find(id);
    if (used > 0 && (it == flushed_.end() || it->second < used)) changed.emplace_back(id, used);
  }
  if (changed.empty()) return absl::OkStatus();
  if (absl::Status s = store_.TouchKeys(changed); !s.ok()) return s;
  for (const auto& [id, used] : changed) flushed_[id] = used;
  return absl::OkStatus();
}

void ApiKeyTable::BackgroundLoop() {
  std::string last_error;  // logged once per distinct error, not every interval
  const int64_t touch_ns = absl::ToInt64Nanoseconds(options_.touch_interval);
  int64_t next_touch_ns = options_.clock->MonotonicNanos() + touch_ns;
  while (wakeup_.Wait(options_.refresh_interval)) {
    absl::Status s = Refresh();
    if (s.ok() && options_.clock->MonotonicNanos() >= next_touch_ns) {
      s = FlushLastUsed();
      next_touch_ns = options_.clock->MonotonicNanos() + touch_ns;
    }
    if (!s.ok() && s.ToString() != last_error) {
      // Keep serving the last good table; a transient store error must not lock everyone out.
      last_error = s.ToString();
      std::fprintf(stderr, "pillar: key table refresh failed (serving the last good table): %s\n",
                   last_error.c_str());
    } else if (s.ok() && !last_error.empty()) {
      last_error.clear();
      std::fprintf(stderr, "pillar: key table refresh works again\n");
    }
  }
}

absl::StatusOr<std::shared_ptr<const Principal>> ApiKeyTable::Verify(std::string_view key_text,
                                                                     int64_t now_us) const {
  absl::StatusOr<ParsedApiKey> key = ParseApiKey(key_text);
  if (!key.ok()) return absl::UnauthenticatedError("malformed API key");
  std::shared_ptr<const Table> table;
  {
    absl::ReaderMutexLock lock(&mu_);
    table = table_;
  }
  auto it = table->find(ToAbsl(key->id));
  // Hash even when the id is unknown, so timing does not tell which ids exist.
  std::string hash = HashApiKeySecret(key->secret);
  WipeString(key->secret);  // 32 bytes: cheap next to the hash
  if (it == table->end() || !ConstantTimeEquals(hash, it->second.secret_hash)) {
    return absl::UnauthenticatedError("unknown API key");
  }
  const Entry& entry = it->second;
  if (entry.revoked) return absl::UnauthenticatedError("API key revoked");
  if (entry.expires_us != 0 && now_us >= entry.expires_us) {
    return absl::UnauthenticatedError("API key expired");
  }
  if (now_us - entry.last_used_us->load(std::memory_order_relaxed) >= kLastUsedPrecisionUs) {
    entry.last_used_us->store(now_us, std::memory_order_relaxed);
  }
  return entry.principal;
}

absl::StatusOr<std::shared_ptr<const Principal>> ApiKeyTable::Current(std::string_view key_id,
                                                                      int64_t now_us) const {
  std::shared_ptr<const Table> table;
  {
    absl::ReaderMutexLock lock(&mu_);
    table = table_;
  }
  auto it = table->find(ToAbsl(key_id));
  if (it == table->end()) return absl::UnauthenticatedError("API key no longer exists");
  const Entry& entry = it->second;
  if (entry.revoked) return absl::UnauthenticatedError("API key revoked");
  if (entry.expires_us != 0 && now_us >= entry.expires_us) {
    return absl::UnauthenticatedError("API key expired");
  }
  return entry.principal;
}

}  // namespace pillar::identity
