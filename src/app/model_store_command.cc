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
#include "app/audit_setup.h"
#include "app/commands.h"
#include "app/config.h"
#include "app/high_water_marks.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/files.h"
#include "common/strings.h"
#include "models/model_aliases.h"
#include "models/model_config.h"
#include "models/model_repository.h"
#include "signing/model_manifest.h"
#include "state/state_store.h"

namespace pillar::app {
namespace {

namespace fs = std::filesystem;

int Fail(std::string_view command, const absl::Status& status) {
  std::fprintf(stderr, "pillar model %s: %s\n", std::string(command).c_str(),
               std::string(status.message()).c_str());
  return 1;
}

struct Store {
  Config config;
  fs::path root;
  std::vector<signing::PublicKey> trusted;
  std::optional<ChangeAudit> audit;          // for a change: opened before it is made
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
    absl::StatusOr<ChangeAudit> audit = ChangeAudit::Open(store.config);
    if (!audit.ok()) return audit.status();
    store.audit.emplace(std::move(*audit));
    const std::string key_path =
        options.key.empty() ? store.config.repository_signing_key : options.key;
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
  store.root = fs::path(options.store.empty() ? store.config.repository_path : options.store);
  absl::StatusOr<std::vector<signing::PublicKey>> trusted =
      signing::ReadPublicKeys(store.config.trusted_keys);
  if (!trusted.ok()) return trusted.status();
  store.trusted = std::move(*trusted);
  if (store.key && store.config.require_signatures &&
      std::none_of(store.trusted.begin(), store.trusted.end(),
                   [&](const auto& k) { return k.key_id == store.key->public_key.key_id; })) {
    return absl::FailedPreconditionError(
        StrCat("signing key ", store.key->public_key.key_id,
               " is not among [repository] trusted_keys: the server would refuse what it signs"));
  }
  return store;
}

// A model's directory, held open by descriptor and reached through /proc/self/fd from then on:
// whoever can write the store could otherwise rename it and leave a link in its place between
// two steps of a push or a move, and the CLI would write where the link points. Error messages
// show the store path, not the descriptor's.
class ModelDirectory {
 public:
  // Opens (creating it when `create`) <root>/<name>, refusing a link.
  [[nodiscard]] static absl::StatusOr<ModelDirectory> Open(const fs::path& root,
                                                           const std::string& name, bool create) {
    const fs::path shown = root / name;
    if (create && ::mkdir(shown.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::InternalError(
          StrCat("cannot create ", shown.string(), ": ", std::strerror(errno)));
    }
    const int fd = ::open(shown.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) {
        return absl::NotFoundError(StrCat("no model '", name, "' in ", root.string()));
      }
      return absl::InvalidArgumentError(StrCat(
          shown.string(), ": ",
          errno == ELOOP || errno == ENOTDIR ? "not a directory (a link?)" : std::strerror(errno)));
    }
    return ModelDirectory(fd, shown);
  }
  ModelDirectory(ModelDirectory&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)),
        path_(std::move(other.path_)),
        shown_(std::move(other.shown_)) {}
  ModelDirectory& operator=(ModelDirectory&&) = delete;
  ~ModelDirectory() {
    if (fd_ >= 0) ::close(fd_);
  }
  const fs::path& path() const { return path_; }  // through the descriptor
  int fd() const { return fd_; }
  // `status` with the descriptor's path replaced by the store's, for people to read.
  [[nodiscard]] absl::Status Shown(const absl::Status& status) const {
    std::string message(status.message());
    const std::string from = path_.string();
    for (size_t at = message.find(from); at != std::string::npos; at = message.find(from, at)) {
      message.replace(at, from.size(), shown_.string());
      at += shown_.string().size();
    }
    return absl::Status(status.code(), message);
  }

 private:
  ModelDirectory(int fd, fs::path shown)
      // "/." so that the path's last component is not the descriptor's magic link: the opens
      // beneath it that refuse links (O_NOFOLLOW) still work on the directory itself.
      : fd_(fd),
        path_(fs::path("/proc/self/fd") / std::to_string(fd) / "."),
        shown_(std::move(shown)) {}
  int fd_;
  fs::path path_;
  fs::path shown_;
};

// The key a change signs with; an error when signatures are required and there is none.
[[nodiscard]] absl::StatusOr<const signing::SigningKey*> ChangeKey(const Store& store) {
  if (store.key) return &*store.key;
  if (store.config.require_signatures) {
    return absl::FailedPreconditionError(
        "signatures are required: give --key (a private key whose public half is in "
        "[repository] trusted_keys) or set [repository] signing_key");
  }
  return nullptr;
}

models::AliasTrust ReadTrust(const Store& store) {
  return {.trusted = store.trusted,
          .require_signature = store.config.require_signatures,
          .admit_generation = {}};
}

[[nodiscard]] absl::Status CheckName(const std::string& name) {
  if (!models::IsValidModelName(name)) {
    return absl::InvalidArgumentError(
        StrCat("model name '", name, "': letters, digits, '-', '_', '.', not starting with '.'"));
  }
  return absl::OkStatus();
}

// What the server would check before loading, from the same bytes it would load: a version it
// would refuse at `subject` ("<model>/<version>") is refused here too.
[[nodiscard]] absl::StatusOr<std::string> CheckServable(const Store& store, const fs::path& dir,
                                                        const std::string& subject) {
  std::string toml;
  std::string root;
  if (store.config.require_signatures) {
    if (store.trusted.empty()) {
      return absl::FailedPreconditionError(
          "signatures are required and no trusted_keys are configured");
    }
    absl::StatusOr<signing::VerifiedModel> verified =
        signing::VerifyModel(dir.string(), store.trusted,
                             {.expected_name = subject, .keep = {"model.toml"}, .after_read = {}});
    if (!verified.ok()) return verified.status();
    if (!verified->contents.contains("model.toml")) {
      return absl::NotFoundError(StrCat(dir.string(), ": no model.toml among the signed files"));
    }
    toml = std::move(verified->contents["model.toml"]);
    root = std::move(verified->root_digest);
  } else {
    absl::StatusOr<std::map<std::string, std::string, std::less<>>> files =
        signing::ReadModelFiles(dir.string(), {"model.toml"});
    if (!files.ok()) return files.status();
    if (!files->contains("model.toml")) {
      return absl::NotFoundError(StrCat(dir.string(), ": no model.toml"));
    }
    toml = std::move((*files)["model.toml"]);
  }
  if (absl::Status s = models::ModelConfig::Parse(toml, (dir / "model.toml").string()).status();
      !s.ok()) {
    return s;
  }
  return root;
}

[[nodiscard]] absl::Status SyncTree(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> paths = {dir};
  for (const auto& entry : fs::recursive_directory_iterator(dir, ec)) paths.push_back(entry.path());
  if (ec) return absl::InternalError(StrCat("cannot list ", dir.string(), ": ", ec.message()));
  for (const fs::path& p : paths) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0 || ::fsync(fd) != 0) {
      if (fd >= 0) ::close(fd);
      return absl::InternalError(StrCat("cannot sync ", p.string()));
    }
    ::close(fd);
  }
  return absl::OkStatus();
}

// Moves `alias` of `name` to `version` ("promote"), or back to where it was ("rollback").
int MoveAlias(const ModelStoreOptions& options, std::string_view action) {
  absl::StatusOr<Store> store = OpenStore(options, /*for_change=*/true);
  if (!store.ok()) return Fail(action, store.status());
  if (absl::Status s = CheckName(options.name); !s.ok()) return Fail(action, s);
  if (!models::IsValidAliasName(options.alias)) {
    return Fail(action, absl::InvalidArgumentError(
                            StrCat("alias '", options.alias,
                                   "': 1 to 64 of a-z, 0-9, '_', '-', starting with a letter")));
  }
  absl::StatusOr<const signing::SigningKey*> key = ChangeKey(*store);
  if (!key.ok()) return Fail(action, key.status());
  absl::StatusOr<ModelDirectory> dir =
      ModelDirectory::Open(store->root, options.name, /*create=*/false);
  if (!dir.ok()) return Fail(action, dir.status());
  auto fail = [&](const absl::Status& status) { return Fail(action, dir->Shown(status)); };
  const fs::path& model_dir = dir->path();
  absl::StatusOr<models::ModelLock> lock = models::ModelLock::Acquire(model_dir);
  if (!lock.ok()) return fail(lock.status());
  HighWaterMarks generations(*store->state);
  absl::StatusOr<int64_t> highest = generations.Highest(options.name);
  if (!highest.ok()) return fail(highest.status());
  absl::StatusOr<models::ModelAliases> aliases =
      models::ReadAliases(model_dir, options.name, ReadTrust(*store));
  if (aliases.ok() && aliases->generation < *highest) {
    aliases = absl::PermissionDeniedError(
        StrCat(fs::path(model_dir / models::kAliasesFile).string(), ": generation ",
               aliases->generation, " is older than generation ", *highest, " seen before"));
  }
  if (!aliases.ok()) {
    if (!options.replace_aliases) {
      return fail(absl::Status(aliases.status().code(),
                               StrCat(aliases.status().message(),
                                      "; to start this model's aliases afresh with this "
                                      "move, give --replace-aliases")));
    }
    std::fprintf(stderr, "pillar model %s: replacing %s's aliases: %s\n",
                 std::string(action).c_str(), options.name.c_str(),
                 std::string(aliases.status().message()).c_str());
    aliases = models::ModelAliases{};
  }
  int64_t target = options.version;
  if (action == "rollback") {
    std::optional<int64_t> previous = aliases->Previous(options.alias);
    if (!previous) {
      return fail(
          absl::FailedPreconditionError(StrCat("alias '", options.alias, "' of ", options.name,
                                               " has no earlier version to go back to")));
    }
    target = *previous;
  }
  const fs::path version_dir = model_dir / std::to_string(target);
  if (!fs::is_directory(version_dir)) {
    return fail(
        absl::NotFoundError(StrCat("no version ", target, " of model '", options.name, "'")));
  }
  if (absl::Status s =
          CheckServable(*store, version_dir, models::VersionSubject(options.name, target)).status();
      !s.ok()) {
    return fail(absl::FailedPreconditionError(
        StrCat("version ", target, " would not be served: ", s.message())));
  }
  auto current = aliases->targets.find(options.alias);
  if (current != aliases->targets.end() && current->second == target) {
    std::printf("%s %s already serves version %lld\n", options.name.c_str(), options.alias.c_str(),
                static_cast<long long>(target));
    return 0;
  }
  const std::string from =
      current == aliases->targets.end() ? "none" : std::to_string(current->second);
  aliases->Move(options.alias, target, std::string(action), LocalOperator(),
                SystemClock().UnixMicros());
  aliases->generation = std::max(aliases->generation, *highest) + 1;
  // Audited before it is made: a move that cannot be audited is not made.
  const std::string move = StrCat(options.alias, ": ", from, " -> ", target);
  if (absl::Status s = store->audit->Record(
          audit::EventKind::kModel, action, StrCat("model:", options.name, "/", options.alias),
          StrCat(move, " (generation ", aliases->generation,
                 *key != nullptr ? StrCat(", signed by ", (*key)->public_key.key_id) : "", ")"));
      !s.ok()) {
    return fail(absl::Status(s.code(), StrCat(move,
                                              " is not made: its audit record was "
                                              "not confirmed durable: ",
                                              s.message())));
  }
  if (absl::Status s = models::WriteAliases(model_dir, options.name, *aliases, *key); !s.ok()) {
    (void)store->audit->RecordFailed(audit::EventKind::kModel, action,
                                     StrCat("model:", options.name, "/", options.alias), s);
    return fail(s);
  }
  if (absl::Status s = generations.Admit(options.name, aliases->generation); !s.ok()) {
    return fail(s);
  }
  std::printf("%s %s\n", options.name.c_str(), move.c_str());
  return 0;
}

}  // namespace

int RunModelPush(const ModelStoreOptions& options) {
  absl::StatusOr<Store> store = OpenStore(options, /*for_change=*/true);
  if (!store.ok()) return Fail("push", store.status());
  if (absl::Status s = CheckName(options.name); !s.ok()) return Fail("push", s);
  const fs::path source = options.dir;
  // The source's own contract must parse; its signature, if any, is judged once the version's
  // number (part of what is signed) is known.
  {
    absl::StatusOr<std::map<std::string, std::string, std::less<>>> files =
        signing::ReadModelFiles(source.string(), {"model.toml"});
    absl::Status parsed =
        !files.ok() ? files.status()
        : !files->contains("model.toml")
            ? absl::NotFoundError(StrCat(source.string(), ": no model.toml"))
            : models::ModelConfig::Parse((*files)["model.toml"], (source / "model.toml").string())
                  .status();
    if (!parsed.ok()) {
      return Fail("push", absl::FailedPreconditionError(
                              StrCat(source.string(), " would not be served: ", parsed.message())));
    }
  }
  absl::StatusOr<const signing::SigningKey*> key = ChangeKey(*store);
  absl::StatusOr<std::vector<signing::FileDigest>> files = signing::DigestDirectory(source);
  if (!files.ok()) return Fail("push", files.status());
  const std::string root = signing::RootDigest(*files);
  absl::StatusOr<ModelDirectory> dir =
      ModelDirectory::Open(store->root, options.name, /*create=*/true);
  if (!dir.ok()) return Fail("push", dir.status());
  auto fail = [&](const absl::Status& status) { return Fail("push", dir->Shown(status)); };
  const fs::path& model_dir = dir->path();
  std::error_code ec;
  absl::StatusOr<models::ModelLock> lock = models::ModelLock::Acquire(model_dir);
  if (!lock.ok()) return fail(lock.status());
  const std::vector<int64_t> versions = models::VersionsIn(model_dir);
  // Content addressed: a version whose manifest claims the same root digest, and verifies, is
  // this content already. Only a claim that matches is verified, and verification checks each
  // file's size against ours before reading it, so a huge file elsewhere in the store costs
  // nothing here.
  for (int64_t v : versions) {
    const fs::path version_dir = model_dir / std::to_string(v);
    absl::StatusOr<std::string> claimed = signing::ClaimedRootDigest(version_dir.string());
    bool same = false;
    if (claimed.ok()) {
      same = *claimed == root &&
             signing::VerifyModel(version_dir.string(), store->trusted,
                                  {.expected_name = models::VersionSubject(options.name, v),
                                   .keep = {},
                                   .after_read = {}})
                 .ok();
    } else if (!store->config.require_signatures) {
      absl::StatusOr<std::vector<signing::FileDigest>> existing =
          signing::DigestDirectory(version_dir.string());
      same = existing.ok() && signing::RootDigest(*existing) == root;
    }
    if (same) {
      std::fprintf(stderr, "pillar model push: same content as %s version %lld; nothing added\n",
                   options.name.c_str(), static_cast<long long>(v));
      std::printf("%lld\n", static_cast<long long>(v));
      return 0;
    }
  }
  // Version numbers are never reused, even after a version's directory is removed (or hidden by
  // someone who can write the store): a signature names "<model>/<n>", so a second content at the
  // same number would make the first one's signature, kept by anyone, valid again for that place.
  // The next number is above the state store's mark (raised by every push and by every version a
  // server verified) and above every directory here that a trusted key signed for its own place;
  // a directory without such a signature (an empty one named 999999999999999998) counts for
  // nothing, so it cannot use the numbers up.
  HighWaterMarks marks(*store->state);
  absl::StatusOr<int64_t> highest = marks.HighestVersion(options.name);
  if (!highest.ok()) return fail(highest.status());
  int64_t last = *highest;
  for (int64_t v : versions) {
    if (v <= last) continue;
    const std::string own = models::VersionSubject(options.name, v);
    absl::StatusOr<std::string> subject =
        signing::SignedSubject((model_dir / std::to_string(v)).string(), store->trusted);
    if (!store->config.require_signatures || (subject.ok() && *subject == own)) last = v;
  }
  if (last >= models::kMaxVersion) {
    return fail(absl::OutOfRangeError(StrCat(options.name, " has no version number left")));
  }
  const int64_t next = last + 1;
  const std::string subject = models::VersionSubject(options.name, next);
  // Pushes hold the model's lock while staging, so any staging directory found now was left by
  // a push that died: it never became a version, and goes.
  for (const auto& entry : fs::directory_iterator(model_dir, ec)) {
    if (entry.path().filename().string().starts_with(".push-")) fs::remove_all(entry.path(), ec);
  }
  const fs::path staging = model_dir / StrCat(".push-", next, "-", ::getpid());
  auto abandon = [&](absl::Status status) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    return fail(status);
  };
  // The staging directory is in the store, where others may write: the copy's digests are taken
  // from the bytes as they are copied (and must equal the source's), and what is signed is those
  // digests, never a second reading of the staged files. A file swapped in staging afterwards no
  // longer matches the signature, and is refused below or by the server.
  absl::StatusOr<std::vector<signing::FileDigest>> copied =
      signing::CopyVersion(source.string(), staging.string());
  if (!copied.ok()) return abandon(copied.status());
  if (signing::RootDigest(*copied) != root) {
    return abandon(absl::AbortedError(StrCat(source.string(), " changed during the push")));
  }
  if (key.ok() && *key != nullptr) {
    if (absl::Status s = signing::SignDigests(staging.string(), subject, *copied, **key); !s.ok()) {
      return abandon(s);
    }
  }
  // The copy, checked as the server will check it: against its signature, from the same bytes,
  // and it must be this content: a staging directory replaced wholesale by another signed for
  // the same place is not what this push adds.
  absl::StatusOr<std::string> servable = CheckServable(*store, staging, subject);
  if (!servable.ok()) {
    return abandon(absl::FailedPreconditionError(
        StrCat("version ", next, " would not be served: ", servable.status().message(),
               key.ok() ? "" : StrCat("; ", key.status().message()))));
  }
  if (!servable->empty() && *servable != root) {
    return abandon(absl::AbortedError(
        StrCat("the staging copy was replaced during the push (it now holds sha256 ", *servable,
               ", not ", root, ")")));
  }
  // Durable before it appears: a server never sees a version whose bytes a crash could lose.
  if (absl::Status s = SyncTree(staging); !s.ok()) return abandon(s);
  // Audited before it is made: a version that cannot be audited is not added.
  const std::string resource = StrCat("model:", options.name, "/", next);
  if (absl::Status s =
          store->audit->Record(audit::EventKind::kModel, "push", resource, StrCat("sha256 ", root));
      !s.ok()) {
    return abandon(absl::Status(s.code(), StrCat("version ", next,
                                                 " is not added: its audit "
                                                 "record was not confirmed durable: ",
                                                 s.message())));
  }
  // Past the record, a failure is recorded too: the log then says the push did not happen.
  auto failed = [&](absl::Status status) {
    (void)store->audit->RecordFailed(audit::EventKind::kModel, "push", resource, status);
    return abandon(std::move(status));
  };
  if (absl::Status s = marks.NoteVersion(options.name, next); !s.ok()) return failed(s);
  const fs::path target = model_dir / std::to_string(next);
  Env& env = *Env::Default();
  if (absl::Status s = env.Rename(staging.string(), target.string()); !s.ok()) return failed(s);
  // Reported done only once the new name survives a power cut.
  if (absl::Status s = env.SyncDir(model_dir.string()); !s.ok()) {
    return failed(absl::Status(s.code(), StrCat("version ", next,
                                                " was added but may not "
                                                "survive a crash: ",
                                                s.message())));
  }
  std::fprintf(stderr, "pillar model push: %s version %lld (sha256 %s)\n", options.name.c_str(),
               static_cast<long long>(next), root.c_str());
  std::printf("%lld\n", static_cast<long long>(next));
  return 0;
}

int RunModelList(const ModelStoreOptions& options) {
  absl::StatusOr<Store> store = OpenStore(options, /*for_change=*/false);
  if (!store.ok()) return Fail("list", store.status());
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(store->root, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory(ec) && models::IsValidModelName(name) &&
        (options.name.empty() || options.name == name)) {
      names.push_back(name);
    }
  }
  if (ec) return Fail("list", absl::NotFoundError(StrCat("cannot read ", store->root.string())));
  std::sort(names.begin(), names.end());
  std::printf("%-24s %8s  %-16s %6s %14s  %s\n", "MODEL", "VERSION", "ALIASES", "FILES", "BYTES",
              "ADDED");
  for (const std::string& name : names) {
    const fs::path model_dir = store->root / name;
    absl::StatusOr<models::ModelAliases> aliases =
        models::ReadAliases(model_dir, name, ReadTrust(*store));
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
      for (const auto& f : fs::recursive_directory_iterator(dir, ec)) {
        if (f.is_regular_file(ec)) {
          bytes += f.file_size(ec);
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

int RunModelPromote(const ModelStoreOptions& options) { return MoveAlias(options, "promote"); }

int RunModelRollback(const ModelStoreOptions& options) { return MoveAlias(options, "rollback"); }

int RunModelHistory(const ModelStoreOptions& options) {
  absl::StatusOr<Store> store = OpenStore(options, /*for_change=*/false);
  if (!store.ok()) return Fail("history", store.status());
  if (absl::Status s = CheckName(options.name); !s.ok()) return Fail("history", s);
  absl::StatusOr<models::ModelAliases> aliases =
      models::ReadAliases(store->root / options.name, options.name, ReadTrust(*store));
  if (!aliases.ok()) return Fail("history", aliases.status());
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

}  // namespace pillar::app
