// `pillar key create|list|revoke`: API keys in the state store. A key's text is printed once,
// at creation; the store keeps only its SHA-256.
#include <cstdio>
#include <ctime>

#include "app/commands.h"
#include "app/config.h"
#include "common/clock.h"
#include "common/json_writer.h"
#include "common/strings.h"
#include "identity/api_key.h"
#include "state/state_store.h"

namespace pillar::app {
namespace {

absl::StatusOr<std::unique_ptr<state::StateStore>> OpenStore(const KeyOptions& options) {
  std::string path = options.state_path;
  if (path.empty()) {
    absl::StatusOr<Config> config = LoadConfig(options.config_path);
    if (!config.ok()) return config.status();
    path = config->state_path;
  }
  return state::OpenSqliteStateStore(path);
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "pillar key: %s\n", std::string(status.message()).c_str());
  return 1;
}

std::string FormatTime(int64_t unix_us) {
  std::time_t seconds = static_cast<std::time_t>(unix_us / 1000000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

int RunKeyCreate(const KeyOptions& options) {
  absl::StatusOr<std::unique_ptr<state::StateStore>> store = OpenStore(options);
  if (!store.ok()) return Fail(store.status());
  if (options.name.empty() || options.name.size() > 128)
    return Fail(absl::InvalidArgumentError("--name must have 1 to 128 characters"));
  identity::NewApiKey key = identity::GenerateApiKey();
  state::ApiKeyRecord record{key.id, options.name, key.secret_hash, SystemClock().UnixMicros(),
                             std::nullopt};
  if (absl::Status s = (*store)->PutKey(record); !s.ok()) return Fail(s);
  if (options.json) {
    JsonWriter w;
    w.BeginObject();
    w.Key("id");
    w.String(key.id);
    w.Key("name");
    w.String(options.name);
    w.Key("key");
    w.String(key.text);
    w.EndObject();
    std::printf("%s\n", w.str().c_str());
  } else {
    std::printf("%s\n", key.text.c_str());
    std::fprintf(stderr, "pillar key: created key %s (%s); it is shown only this once\n",
                 key.id.c_str(), options.name.c_str());
  }
  return 0;
}

int RunKeyList(const KeyOptions& options) {
  absl::StatusOr<std::unique_ptr<state::StateStore>> store = OpenStore(options);
  if (!store.ok()) return Fail(store.status());
  absl::StatusOr<std::vector<state::ApiKeyRecord>> keys = (*store)->ListKeys();
  if (!keys.ok()) return Fail(keys.status());
  if (options.json) {
    JsonWriter w;
    w.BeginArray();
    for (const auto& k : *keys) {
      w.BeginObject();
      w.Key("id");
      w.String(k.id);
      w.Key("name");
      w.String(k.name);
      w.Key("created");
      w.String(FormatTime(k.created_us));
      w.Key("revoked");
      if (k.revoked_us)
        w.String(FormatTime(*k.revoked_us));
      else
        w.Null();
      w.EndObject();
    }
    w.EndArray();
    std::printf("%s\n", w.str().c_str());
    return 0;
  }
  std::printf("%-14s %-22s %-22s %s\n", "ID", "CREATED", "REVOKED", "NAME");
  for (const auto& k : *keys) {
    std::printf("%-14s %-22s %-22s %s\n", k.id.c_str(), FormatTime(k.created_us).c_str(),
                k.revoked_us ? FormatTime(*k.revoked_us).c_str() : "-", k.name.c_str());
  }
  return 0;
}

int RunKeyRevoke(const KeyOptions& options) {
  absl::StatusOr<std::unique_ptr<state::StateStore>> store = OpenStore(options);
  if (!store.ok()) return Fail(store.status());
  if (absl::Status s = (*store)->RevokeKey(options.id, SystemClock().UnixMicros()); !s.ok())
    return Fail(s);
  std::fprintf(stderr, "pillar key: revoked %s\n", options.id.c_str());
  return 0;
}

}  // namespace pillar::app
