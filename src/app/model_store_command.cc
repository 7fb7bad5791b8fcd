// `pillar model push|list|promote|rollback|history`: the versions of the model store and the
// aliases that route traffic to them. Versions are immutable and identified by their content
// (the root digest over their files): pushing the same bytes twice is one version. A pushed
// version is signed for its place in the store ("<model>/<version>"), and the aliases file is
// signed at every move with a generation one above any seen before (state store), so that what
// is served, and where aliases point, is decided by holders of a signing key only. Aliases move
// under the model's lock and every move is kept with who and when (aliases.json) and audited.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/time/clock.h"
#include "app/commands.h"
#include "app/config.h"
#include "audit/change_audit.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/files.h"
#include "common/strings.h"
#include "models/high_water_marks.h"
#include "models/model_aliases.h"
#include "models/model_config.h"
#include "models/model_repository.h"
#include "models/model_store.h"
#include "signing/model_manifest.h"
#include "state/state_store.h"

namespace pillar::app {
namespace {

struct ModelStoreOptions {
  std::string config_path;
  std::string store;  // overrides [repository] path
  std::string name;
  std::string dir;  // push: the version directory to add
  int64_t version = 0;
  std::string alias = "prod";
  std::string key;               // push, promote, rollback: overrides [repository] signing_key
  bool replace_aliases = false;  // promote, rollback: start from no aliases if the file is refused
};

namespace fs = std::filesystem;

struct Store {
  Config config;
  fs::path root;
  std::vector<signing::PublicKey> trusted;
  std::optional<audit::ChangeAudit> audit;   // for a change: opened before it is made
  std::optional<signing::SigningKey> key;    // for a change: --key or [repository] signing_key
  std::unique_ptr<state::StateStore> state;  // for a change: the aliases' generations
};

[[nodiscard]] absl::StatusOr<Store> OpenStore(const ModelStoreOptions& options, bool for_change) {
  // A change is audited in the log, and numbered in the state file, that the server's
  // configuration names: with --store alone they would be the working directory's, where no
  // server looks (reading needs neither).
  if (for_change && options.config_path.empty() && !options.store.empty()) {
    return absl::InvalidArgumentError(
        "--store without -c: give the server's configuration (-c), whose [audit] log records this "
        "change and whose state file keeps the store's version and alias marks");
  }
  absl::StatusOr<Config> config = LoadConfig(options.config_path);
  if (!config.ok()) return config.status();
  Store store{
      .config = std::move(*config), .root = {}, .trusted = {}, .audit = {}, .key = {}, .state = {}};
  if (for_change) {
    absl::StatusOr<audit::ChangeAudit> audit = audit::ChangeAudit::Open(store.config.audit);
    if (!audit.ok()) return audit.status();
    store.audit.emplace(std::move(*audit));
    const std::string key_path =
        options.key.empty() ? store.config.repository.signing_key : options.key;
    if (!key_path.empty()) {
      absl::StatusOr<signing::SigningKey> key = signing::ReadPrivateKey(key_path);
      if (!key.ok()) return key.status();
      store.key.emplace(std::move(*key));
    }
    absl::StatusOr<std::unique_ptr<state::StateStore>> state =
        state::OpenSqliteStateStore(store.config.state_path);
    if (!state.ok()) return state.status();
    store.state = std::move(*state);
  }
  store.root = fs::path(options.store.empty() ? store.config.repository.path : options.store);
  absl::StatusOr<std::vector<signing::PublicKey>> trusted =
      signing::ReadPublicKeys(store.config.repository.trusted_keys);
  if (!trusted.ok()) return trusted.status();
  store.trusted = std::move(*trusted);
  if (store.key && store.config.repository.require_signatures &&
      std::none_of(store.trusted.begin(), store.trusted.end(),
                   [&](const auto& k) { return k.key_id == store.key->public_key.key_id; })) {
    return absl::FailedPreconditionError(
        StrCat("signing key ", store.key->public_key.key_id,
               " is not among [repository] trusted_keys: the server would refuse what it signs"));
  }
  return store;
}

// The store as the configuration (or --store) names it.
models::ModelStore Models(const Store& store) {
  return models::ModelStore({.root = store.root,
                             .trusted = store.trusted,
                             .require_signatures = store.config.repository.require_signatures});
}

// What a change made from here carries: the key, the audit log and the marks OpenStore opened.
models::StoreChange Change(Store& store, models::HighWaterMarks& marks, std::string_view action,
                           const std::string& model) {
  return {.key = store.key ? &*store.key : nullptr,
          .audit = &*store.audit,
          .marks = &marks,
          .by = audit::LocalOperator(),
          .clock = &SystemClock(),
          .on_replaced_aliases = [action, model](const absl::Status& why) {
            std::fprintf(stderr, "pillar %s: replacing %s's aliases: %s\n",
                         std::string(action).c_str(), model.c_str(),
                         std::string(why.message()).c_str());
          }};
}

// Moves `alias` of `name` to `version` ("promote"), or back to where it was ("rollback").
int MoveAlias(const ModelStoreOptions& options, models::AliasAction action) {
  const std::string_view name =
      action == models::AliasAction::kPromote ? "model promote" : "model rollback";
  absl::StatusOr<Store> store = OpenStore(options, /*for_change=*/true);
  if (!store.ok()) return Fail(name, store.status());
  models::HighWaterMarks marks(*store->state);
  absl::StatusOr<models::AliasMoved> moved =
      Models(*store).MoveAlias({.name = options.name,
                                .alias = options.alias,
                                .action = action,
                                .version = options.version,
                                .replace_aliases = options.replace_aliases},
                               Change(*store, marks, name, options.name));
  if (!moved.ok()) return Fail(name, moved.status());
  if (!moved->changed) {
    std::printf("%s %s already serves version %lld\n", options.name.c_str(), options.alias.c_str(),
                static_cast<long long>(moved->to));
  } else {
    std::printf("%s %s\n", options.name.c_str(), moved->Describe(options.alias).c_str());
  }
  return 0;
}

int RunModelPush(const ModelStoreOptions& options) {
  absl::StatusOr<Store> store = OpenStore(options, /*for_change=*/true);
  if (!store.ok()) return Fail("model push", store.status());
  models::HighWaterMarks marks(*store->state);
  absl::StatusOr<models::Pushed> pushed = Models(*store).Push(
      options.name, options.dir, Change(*store, marks, "model push", options.name));
  if (!pushed.ok()) return Fail("model push", pushed.status());
  if (pushed->added) {
    std::fprintf(stderr, "pillar model push: %s version %lld (sha256 %s)\n", options.name.c_str(),
                 static_cast<long long>(pushed->version), pushed->root_digest.c_str());
  } else {
    std::fprintf(stderr, "pillar model push: same content as %s version %lld; nothing added\n",
                 options.name.c_str(), static_cast<long long>(pushed->version));
  }
  std::printf("%lld\n", static_cast<long long>(pushed->version));
  return 0;
}

int RunModelList(const ModelStoreOptions& options) {
  absl::StatusOr<Store> store = OpenStore(options, /*for_change=*/false);
  if (!store.ok()) return Fail("model list", store.status());
  std::vector<std::string> names;
  std::error_code ec;
  // increment(ec), not ++: the operator throws on a read error, and nothing here catches.
  for (fs::directory_iterator it(store->root, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    if (it->is_directory(type_ec) && models::IsValidModelName(name) &&
        (options.name.empty() || options.name == name)) {
      names.push_back(name);
    }
  }
  if (ec)
    return Fail("model list", absl::NotFoundError(StrCat("cannot read ", store->root.string())));
  std::sort(names.begin(), names.end());
  std::printf("%-24s %8s  %-16s %6s %14s  %s\n", "MODEL", "VERSION", "ALIASES", "FILES", "BYTES",
              "ADDED");
  for (const std::string& name : names) {
    const fs::path model_dir = store->root / name;
    absl::StatusOr<models::ModelAliases> aliases =
        models::ReadAliases(model_dir, name, Models(*store).ReadTrust());
    for (int64_t v : models::VersionsIn(model_dir)) {
      std::string pointing;
      if (aliases.ok()) {
        for (const auto& [alias, version] : aliases->targets) {
          if (version == v) StrAppend(&pointing, pointing.empty() ? "" : ",", alias);
        }
      }
      const fs::path dir = model_dir / std::to_string(v);
      uint64_t bytes = 0;
      int count = 0;
      for (fs::recursive_directory_iterator f(dir, ec);
           !ec && f != fs::recursive_directory_iterator(); f.increment(ec)) {
        std::error_code file_ec;
        if (f->is_regular_file(file_ec)) {
          bytes += f->file_size(file_ec);
          ++count;
        }
      }
      const auto added = fs::last_write_time(dir, ec);
      const int64_t added_s = std::chrono::duration_cast<std::chrono::seconds>(
                                  std::chrono::file_clock::to_sys(added).time_since_epoch())
                                  .count();
      std::printf("%-24s %8lld  %-16s %6d %14llu  %s\n", name.c_str(), static_cast<long long>(v),
                  pointing.empty() ? "-" : pointing.c_str(), count,
                  static_cast<unsigned long long>(bytes), FormatUtc(added_s).c_str());
    }
    if (!aliases.ok()) {
      std::fprintf(stderr, "pillar model list: %s\n",
                   std::string(aliases.status().message()).c_str());
    }
  }
  return 0;
}

int RunModelHistory(const ModelStoreOptions& options) {
  absl::StatusOr<Store> store = OpenStore(options, /*for_change=*/false);
  if (!store.ok()) return Fail("model history", store.status());
  if (absl::Status s = models::CheckModelName(options.name); !s.ok())
    return Fail("model history", s);
  absl::StatusOr<models::ModelAliases> aliases =
      models::ReadAliases(store->root / options.name, options.name, Models(*store).ReadTrust());
  if (!aliases.ok()) return Fail("model history", aliases.status());
  if (aliases->signed_by.empty()) {
    std::printf("# aliases.json generation %lld, not signed\n",
                static_cast<long long>(aliases->generation));
  } else {
    std::printf("# aliases.json generation %lld, signed by key %s\n",
                static_cast<long long>(aliases->generation), aliases->signed_by.c_str());
  }
  std::printf("%-27s %-12s %-9s %6s %6s  %s\n", "TIME", "ALIAS", "ACTION", "FROM", "TO", "BY");
  for (const models::AliasMove& m : aliases->history) {
    std::printf("%-27s %-12s %-9s %6s %6lld  %s\n", FormatUtcMicros(m.time_us).c_str(),
                m.alias.c_str(), m.action.c_str(), m.from ? std::to_string(*m.from).c_str() : "-",
                static_cast<long long>(m.to), m.by.c_str());
  }
  return 0;
}

}  // namespace

void AddModelStoreCommands(CLI::App& model, Commands& commands) {
  auto store = std::make_shared<ModelStoreOptions>();
  auto store_source = [&store](CLI::App* cmd) {
    cmd->add_option("-c,--config", store->config_path,
                    "Configuration file ([repository] path and trusted_keys, [audit])");
    cmd->add_option("--store", store->store, "The model store (overrides [repository] path)");
  };
  auto store_key = [&store](CLI::App* cmd) {
    cmd->add_option("--key", store->key,
                    "The signing key (overrides [repository] signing_key): versions and alias "
                    "files are signed for where they are served");
  };
  CLI::App* push = model.add_subcommand(
      "push",
      "Add a version directory to the store as a new, immutable version, signed for its place");
  store_source(push);
  push->add_option("dir", store->dir, "The version directory (model.toml, model.pt, signature)")
      ->required();
  push->add_option("--name", store->name, "The model's name")->required();
  store_key(push);
  commands.On(push, [store] { return RunModelPush(*store); });
  CLI::App* list = model.add_subcommand("list", "List the store's versions and aliases");
  store_source(list);
  list->add_option("--name", store->name, "Only this model");
  commands.On(list, [store] { return RunModelList(*store); });
  CLI::App* promote = model.add_subcommand("promote", "Point an alias at a version");
  store_source(promote);
  promote->add_option("name", store->name, "The model")->required();
  promote->add_option("version", store->version, "The version")
      ->required()
      ->check(CLI::PositiveNumber);
  promote->add_option("--alias", store->alias, "The alias (default prod)");
  store_key(promote);
  promote->add_flag("--replace-aliases", store->replace_aliases,
                    "When aliases.json is refused (unsigned, forged, replayed), start the model's "
                    "aliases afresh with this move");
  commands.On(promote, [store] { return MoveAlias(*store, models::AliasAction::kPromote); });
  CLI::App* rollback = model.add_subcommand(
      "rollback", "Point an alias back at the version it named before its last move");
  store_source(rollback);
  rollback->add_option("name", store->name, "The model")->required();
  rollback->add_option("--alias", store->alias, "The alias (default prod)");
  store_key(rollback);
  commands.On(rollback, [store] { return MoveAlias(*store, models::AliasAction::kRollback); });
  CLI::App* history = model.add_subcommand(
      "history", "Every alias move of a model: when, which, from, to, by whom");
  store_source(history);
  history->add_option("name", store->name, "The model")->required();
  commands.On(history, [store] { return RunModelHistory(*store); });
}

}  // namespace pillar::app
