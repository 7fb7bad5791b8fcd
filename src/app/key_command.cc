// `pillar key create|list|revoke|rotate`: API keys in the state store. A key's text is printed
// once, at creation; the store keeps only its SHA-256.
#include <algorithm>
#include <cstdio>
#include <ctime>

#include "absl/cleanup/cleanup.h"
#include "app/cli_values.h"
#include "app/commands.h"
#include "app/config.h"
#include "audit/change_audit.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/json_writer.h"
#include "common/strings.h"
#include "identity/api_key.h"
#include "state/state_store.h"

namespace pillar::app {
namespace {

struct KeyOptions {
  std::string config_path;
  std::string state_path;  // overrides the config's [state] path
  std::string name;
  std::string id;
  bool json = false;
  // create
  std::string owner;
  std::string tenant;
  std::vector<std::string> roles;
  std::vector<std::string> attributes;  // "name=v1,v2"
  std::string expires_in;               // "90d", "12h", "30m", "45s"; empty: never
  // rotate
  std::string overlap = "24h";  // how long the old key keeps working
};

// The key store, and (for a change) the audit log opened before the change is made.
struct KeyStore {
  std::unique_ptr<state::StateStore> store;
  std::optional<audit::ChangeAudit> audit;
};

[[nodiscard]] absl::StatusOr<KeyStore> OpenStore(const KeyOptions& options, bool for_change) {
  if (for_change && options.config_path.empty() && !options.state_path.empty()) {
    // Without a configuration the audit log would be the default one, ./audit.log in whatever
    // directory the command runs from: a record no one checks, while the log the server's
    // configuration names never hears of the change. Guessing another place (beside the state
    // database) is right only for some layouts; refusing is right for all of them.
    return absl::InvalidArgumentError(
        "a key change is recorded in the audit log the configuration names, and --state names "
        "only the key store: give the server's configuration with -c (--state then overrides "
        "its state database)");
  }
  absl::StatusOr<Config> config = LoadConfig(options.config_path);
  if (!config.ok()) return config.status();
  KeyStore keys;
  absl::StatusOr<std::unique_ptr<state::StateStore>> store = state::OpenSqliteStateStore(
      options.state_path.empty() ? config->state_path : options.state_path);
  if (!store.ok()) return store.status();
  keys.store = std::move(*store);
  if (for_change) {
    absl::StatusOr<audit::ChangeAudit> audit = audit::ChangeAudit::Open(config->audit);
    if (!audit.ok()) return audit.status();
    keys.audit.emplace(std::move(*audit));
  }
  return keys;
}

// Every key change is audited (kind key), and the record is durable before the change is made:
// a change that could not be audited is refused, not made (docs/formats/audit-log.md).
[[nodiscard]] absl::Status AuditKeyChange(KeyStore& keys, std::string_view action,
                                          const std::string& id, const std::string& reason) {
  absl::Status s = keys.audit->Record(audit::EventKind::kKey, action, StrCat("key:", id), reason);
  if (!s.ok()) {
    return absl::Status(s.code(), StrCat("the key change is not made: its audit record could not "
                                         "be made durable: ",
                                         s.message()));
  }
  return absl::OkStatus();
}

// Making an audited change failed: the log says so too (best effort), and the command fails.
int FailKeyChange(KeyStore& keys, std::string_view action, const std::string& id,
                  const absl::Status& error) {
  if (absl::Status s =
          keys.audit->RecordFailed(audit::EventKind::kKey, action, StrCat("key:", id), error);
      !s.ok()) {
    std::fprintf(stderr,
                 "pillar key: the audit log holds this %s as made, and its failure could not be "
                 "recorded: %s\n",
                 std::string(action).c_str(), std::string(s.message()).c_str());
  }
  return Fail("key", error);
}

std::string FormatTime(int64_t unix_us) { return FormatUtc(unix_us / 1000000); }

std::string OptionalTime(const std::optional<int64_t>& t) { return t ? FormatTime(*t) : "-"; }

// Validates and builds the record of a new key from the options (and, for a rotation, the key
// it succeeds).
[[nodiscard]] absl::StatusOr<state::ApiKeyRecord> NewRecord(const KeyOptions& options,
                                                            const identity::NewApiKey& key,
                                                            int64_t now_us) {
  if (options.name.empty() || options.name.size() > 128) {
    return absl::InvalidArgumentError("--name must have 1 to 128 characters");
  }
  state::ApiKeyRecord record;
  record.id = key.id;
  record.name = options.name;
  record.secret_hash = key.secret_hash;
  record.created_us = now_us;
  record.owner = options.owner;
  record.tenant = options.tenant;
  if (!options.tenant.empty() && !IsName(options.tenant)) {
    return absl::InvalidArgumentError(StrCat("--tenant '", options.tenant, "': ", kNameRule));
  }
  for (const std::string& role : options.roles) {
    if (!IsName(role))
      return absl::InvalidArgumentError(StrCat("--role '", role, "': ", kNameRule));
    record.roles.push_back(role);
  }
  absl::StatusOr<std::map<std::string, std::vector<std::string>>> attributes =
      ParseAttributes(options.attributes);
  if (!attributes.ok()) return attributes.status();
  record.attributes = std::move(*attributes);
  if (!options.expires_in.empty()) {
    absl::StatusOr<int64_t> seconds = ParseDurationSeconds(options.expires_in);
    if (!seconds.ok()) return seconds.status();
    record.expires_us = now_us + *seconds * 1'000'000;
  }
  return record;
}

void PrintNewKey(const KeyOptions& options, const identity::NewApiKey& key,
                 const state::ApiKeyRecord& record) {
  if (options.json) {
    // Reserved up front so that no buffer holding the key is outgrown and freed unwiped (the
    // name, at most 128 characters, escapes to at most 768).
    JsonWriter w(2048);
    w.BeginObject();
    w.Key("id");
    w.String(key.id);
    w.Key("name");
    w.String(record.name);
    w.Key("key");
    w.String(key.text);
    w.Key("expires");
    if (record.expires_us) {
      w.String(FormatTime(*record.expires_us));
    } else {
      w.Null();
    }
    w.EndObject();
    std::string json = std::move(w).Take();
    std::printf("%s\n", json.c_str());
    WipeString(json);
  } else {
    std::printf("%s\n", key.text.c_str());
    std::fprintf(stderr, "pillar key: created key %s (%s); it is shown only this once\n",
                 key.id.c_str(), record.name.c_str());
  }
}

int RunKeyCreate(const KeyOptions& options) {
  absl::StatusOr<KeyStore> keys = OpenStore(options, /*for_change=*/true);
  if (!keys.ok()) return Fail("key", keys.status());
  state::StateStore* store = keys->store.get();
  identity::NewApiKey key = identity::GenerateApiKey();
  // The key's text is shown once and never needed again, whichever way this returns.
  absl::Cleanup wipe_text = [&key] { WipeString(key.text); };
  absl::StatusOr<state::ApiKeyRecord> record = NewRecord(options, key, SystemClock().UnixMicros());
  if (!record.ok()) return Fail("key", record.status());
  std::string roles;
  for (const std::string& r : record->roles) StrAppend(&roles, roles.empty() ? "" : ",", r);
  // The record names the key's id, generated above, so it can come first.
  if (absl::Status s = AuditKeyChange(
          *keys, "create", record->id,
          StrCat("name=", record->name, " tenant=", record->tenant, " roles=", roles));
      !s.ok()) {
    return Fail("key", s);
  }
  if (absl::Status s = store->PutKey(*record); !s.ok()) {
    return FailKeyChange(*keys, "create", record->id, s);
  }
  PrintNewKey(options, key, *record);
  if (record->roles.empty()) {
    std::fprintf(stderr,
                 "pillar key: note: the key has no roles; under deny-by-default it may do only "
                 "what a rule for roles [\"*\"] grants\n");
  }
  return 0;
}

int RunKeyRotate(const KeyOptions& options) {
  absl::StatusOr<KeyStore> opened = OpenStore(options, /*for_change=*/true);
  if (!opened.ok()) return Fail("key", opened.status());
  state::StateStore* store = opened->store.get();
  absl::StatusOr<std::vector<state::ApiKeyRecord>> keys = store->ListKeys();
  if (!keys.ok()) return Fail("key", keys.status());
  const state::ApiKeyRecord* old = nullptr;
  for (const auto& k : *keys) {
    if (k.id == options.id) old = &k;
  }
  if (old == nullptr)
    return Fail("key", absl::NotFoundError(StrCat("no key with id ", options.id)));
  absl::StatusOr<int64_t> overlap = ParseDurationSeconds(options.overlap);
  if (!overlap.ok()) return Fail("key", overlap.status());
  // The successor inherits who the key is; only the secret (and the clock) are new.
  KeyOptions successor = options;
  successor.name = old->name;
  successor.owner = old->owner;
  successor.tenant = old->tenant;
  successor.roles = old->roles;
  successor.attributes.clear();
  for (const auto& [name, values] : old->attributes) {
    std::string joined;
    for (const std::string& v : values) StrAppend(&joined, joined.empty() ? "" : ",", v);
    successor.attributes.push_back(StrCat(name, "=", joined));
  }
  const int64_t now_us = SystemClock().UnixMicros();
  identity::NewApiKey key = identity::GenerateApiKey();
  absl::Cleanup wipe_text = [&key] { WipeString(key.text); };  // as in RunKeyCreate
  absl::StatusOr<state::ApiKeyRecord> record = NewRecord(successor, key, now_us);
  if (!record.ok()) return Fail("key", record.status());
  if (!options.expires_in.empty()) {
    // An explicit --expires-in applies to the new key.
  } else if (old->expires_us && old->created_us < *old->expires_us) {
    // Keep the old key's lifetime for the new one.
    record->expires_us = now_us + (*old->expires_us - old->created_us);
  }
  if (absl::Status s = AuditKeyChange(*opened, "rotate", old->id,
                                      StrCat("successor ", record->id, ", old key expires ",
                                             FormatTime(now_us + *overlap * 1'000'000)));
      !s.ok()) {
    return Fail("key", s);
  }
  if (absl::Status s = store->RotateKey(old->id, *record, now_us + *overlap * 1'000'000); !s.ok()) {
    return FailKeyChange(*opened, "rotate", old->id, s);
  }
  PrintNewKey(options, key, *record);
  std::fprintf(stderr, "pillar key: %s now expires at %s\n", old->id.c_str(),
               FormatTime(now_us + *overlap * 1'000'000).c_str());
  return 0;
}

int RunKeyList(const KeyOptions& options) {
  absl::StatusOr<KeyStore> opened = OpenStore(options, /*for_change=*/false);
  if (!opened.ok()) return Fail("key", opened.status());
  absl::StatusOr<std::vector<state::ApiKeyRecord>> keys = opened->store->ListKeys();
  if (!keys.ok()) return Fail("key", keys.status());
  if (options.json) {
    JsonWriter w;
    w.BeginArray();
    auto time_or_null = [&](const std::optional<int64_t>& t) {
      if (t) {
        w.String(FormatTime(*t));
      } else {
        w.Null();
      }
    };
    for (const auto& k : *keys) {
      w.BeginObject();
      w.Key("id");
      w.String(k.id);
      w.Key("name");
      w.String(k.name);
      w.Key("owner");
      w.String(k.owner);
      w.Key("tenant");
      w.String(k.tenant);
      w.Key("roles");
      w.BeginArray();
      for (const std::string& r : k.roles) w.String(r);
      w.EndArray();
      w.Key("attributes");
      w.BeginObject();
      for (const auto& [name, values] : k.attributes) {
        w.Key(name);
        w.BeginArray();
        for (const std::string& v : values) w.String(v);
        w.EndArray();
      }
      w.EndObject();
      w.Key("created");
      w.String(FormatTime(k.created_us));
      w.Key("expires");
      time_or_null(k.expires_us);
      w.Key("last_used");
      time_or_null(k.last_used_us);
      w.Key("revoked");
      time_or_null(k.revoked_us);
      w.Key("replaced_by");
      if (k.replaced_by.empty()) {
        w.Null();
      } else {
        w.String(k.replaced_by);
      }
      w.EndObject();
    }
    w.EndArray();
    std::printf("%s\n", w.str().c_str());
    return 0;
  }
  std::printf("%-14s %-12s %-16s %-22s %-22s %-22s %-22s %s\n", "ID", "TENANT", "ROLES", "CREATED",
              "EXPIRES", "LAST USED", "REVOKED", "NAME");
  for (const auto& k : *keys) {
    std::string roles;
    for (const std::string& r : k.roles) StrAppend(&roles, roles.empty() ? "" : ",", r);
    std::printf("%-14s %-12s %-16s %-22s %-22s %-22s %-22s %s\n", k.id.c_str(),
                k.tenant.empty() ? "-" : k.tenant.c_str(), roles.empty() ? "-" : roles.c_str(),
                FormatTime(k.created_us).c_str(), OptionalTime(k.expires_us).c_str(),
                OptionalTime(k.last_used_us).c_str(), OptionalTime(k.revoked_us).c_str(),
                k.name.c_str());
  }
  return 0;
}

int RunKeyRevoke(const KeyOptions& options) {
  absl::StatusOr<KeyStore> keys = OpenStore(options, /*for_change=*/true);
  if (!keys.ok()) return Fail("key", keys.status());
  // A mistyped id is refused before anything is recorded: the log would otherwise hold a
  // revocation of a key that never existed (and its failure).
  absl::StatusOr<std::vector<state::ApiKeyRecord>> all = keys->store->ListKeys();
  if (!all.ok()) return Fail("key", all.status());
  if (std::none_of(all->begin(), all->end(),
                   [&](const state::ApiKeyRecord& k) { return k.id == options.id; })) {
    return Fail("key", absl::NotFoundError(StrCat("no key with id ", options.id)));
  }
  if (absl::Status s = AuditKeyChange(*keys, "revoke", options.id, ""); !s.ok())
    return Fail("key", s);
  if (absl::Status s = keys->store->RevokeKey(options.id, SystemClock().UnixMicros()); !s.ok()) {
    return FailKeyChange(*keys, "revoke", options.id, s);
  }
  std::fprintf(stderr, "pillar key: revoked %s\n", options.id.c_str());
  return 0;
}

}  // namespace

void AddKeyCommands(CLI::App& cli, Commands& commands) {
  auto key = std::make_shared<KeyOptions>();
  CLI::App* group = cli.add_subcommand("key", "Manage API keys");
  group->require_subcommand(1);
  group->fallthrough();  // "key create -c FILE" as well as "key -c FILE create"
  group->add_option("-c,--config", key->config_path, "Configuration file (TOML)");
  group->add_option("--state", key->state_path, "State database (overrides the config)");
  group->add_flag("--json", key->json, "Print JSON");
  CLI::App* create = group->add_subcommand("create", "Create a key; its text is printed once");
  create->add_option("--name", key->name, "What the key is for")->required();
  create->add_option("--owner", key->owner, "Who is responsible for the key");
  create->add_option("--tenant", key->tenant, "The tenant the key acts for");
  create->add_option("--role", key->roles, "A role the key holds (repeatable)");
  create->add_option("--attr", key->attributes, "An attribute, name=v1[,v2] (repeatable)");
  create->add_option("--expires-in", key->expires_in, "Lifetime: 90d, 12h, 30m, 45s");
  commands.On(create, [key] { return RunKeyCreate(*key); });
  CLI::App* list = group->add_subcommand("list", "List keys (never their secrets)");
  commands.On(list, [key] { return RunKeyList(*key); });
  CLI::App* revoke = group->add_subcommand("revoke", "Revoke a key by id");
  revoke->add_option("id", key->id, "Key id (the 12 hex characters after pk_)")->required();
  commands.On(revoke, [key] { return RunKeyRevoke(*key); });
  CLI::App* rotate = group->add_subcommand(
      "rotate", "Make a successor key; the old one keeps working for the overlap, then expires");
  rotate->add_option("id", key->id, "Key id to rotate")->required();
  rotate->add_option("--overlap", key->overlap, "How long the old key stays valid (default 24h)");
  rotate->add_option("--expires-in", key->expires_in, "Lifetime of the new key");
  commands.On(rotate, [key] { return RunKeyRotate(*key); });
}

}  // namespace pillar::app
