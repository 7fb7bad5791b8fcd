#include "models/model_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <utility>

#include "common/env.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "models/model_config.h"
#include "models/model_repository.h"
#include "signing/model_manifest.h"

namespace pillar::models {
namespace {

namespace fs = std::filesystem;

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
[[nodiscard]] absl::StatusOr<const signing::SigningKey*> ChangeKey(const ModelStoreOptions& store,
                                                                   const StoreChange& change) {
  if (change.key != nullptr) return change.key;
  if (store.require_signatures) {
    return absl::FailedPreconditionError(
        "signatures are required: give --key (a private key whose public half is in "
        "[repository] trusted_keys) or set [repository] signing_key");
  }
  return nullptr;
}

[[nodiscard]] absl::Status SyncTree(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> paths = {dir};
  // increment(ec), not ++: the operator throws on a read error.
  for (fs::recursive_directory_iterator it(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    paths.push_back(it->path());
  }
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

// The source's own contract must parse; its signature, if any, is judged once the version's
// number (part of what is signed) is known.
[[nodiscard]] absl::Status CheckSource(const fs::path& source) {
  absl::StatusOr<std::map<std::string, std::string, std::less<>>> files =
      signing::ReadModelFiles(source.string(), {"model.toml"});
  absl::Status parsed =
      !files.ok() ? files.status()
      : !files->contains("model.toml")
          ? absl::NotFoundError(StrCat(source.string(), ": no model.toml"))
          : ModelConfig::Parse((*files)["model.toml"], (source / "model.toml").string()).status();
  if (parsed.ok()) return parsed;
  return absl::FailedPreconditionError(
      StrCat(source.string(), " would not be served: ", parsed.message()));
}

// Content addressed: a version whose manifest claims the same root digest, and verifies, is
// this content already. Only a claim that matches is verified, and verification checks each
// file's size against ours before reading it, so a huge file elsewhere in the store costs
// nothing here.
std::optional<int64_t> SameContent(const ModelStoreOptions& store, const fs::path& model_dir,
                                   const std::string& name, const std::vector<int64_t>& versions,
                                   const std::string& root) {
  for (int64_t v : versions) {
    const fs::path version_dir = model_dir / std::to_string(v);
    absl::StatusOr<std::string> claimed = signing::ClaimedRootDigest(version_dir.string());
    bool same = false;
    if (claimed.ok()) {
      same = *claimed == root &&
             signing::VerifyModel(
                 version_dir.string(), store.trusted,
                 {.expected_name = VersionSubject(name, v), .keep = {}, .after_read = {}})
                 .ok();
    } else if (!store.require_signatures) {
      absl::StatusOr<std::vector<signing::FileDigest>> existing =
          signing::DigestDirectory(version_dir.string());
      same = existing.ok() && signing::RootDigest(*existing) == root;
    }
    if (same) return v;
  }
  return std::nullopt;
}

// Version numbers are never reused, even after a version's directory is removed (or hidden by
// someone who can write the store): a signature names "<model>/<n>", so a second content at the
// same number would make the first one's signature, kept by anyone, valid again for that place.
// The next number is above the state store's mark (raised by every push and by every version a
// server verified) and above every directory here that a trusted key signed for its own place;
// a directory without such a signature (an empty one named 999999999999999998) counts for
// nothing, so it cannot use the numbers up.
[[nodiscard]] absl::StatusOr<int64_t> NextVersion(const ModelStoreOptions& store,
                                                  const fs::path& model_dir,
                                                  const std::string& name,
                                                  const std::vector<int64_t>& versions,
                                                  HighWaterMarks& marks) {
  PILLAR_ASSIGN_OR_RETURN(int64_t last, marks.HighestVersion(name));
  for (int64_t v : versions) {
    if (v <= last) continue;
    const std::string own = VersionSubject(name, v);
    absl::StatusOr<std::string> subject =
        signing::SignedSubject((model_dir / std::to_string(v)).string(), store.trusted);
    if (!store.require_signatures || (subject.ok() && *subject == own)) last = v;
  }
  if (last >= kMaxVersion) {
    return absl::OutOfRangeError(StrCat(name, " has no version number left"));
  }
  return last + 1;
}

// Pushes hold the model's lock while staging, so any staging directory found now was left by a
// push that died: it never became a version, and goes.
void RemoveDeadStaging(const fs::path& model_dir) {
  std::error_code ec;
  for (fs::directory_iterator it(model_dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    std::error_code remove_ec;
    if (it->path().filename().string().starts_with(".push-")) fs::remove_all(it->path(), remove_ec);
  }
}

// Removes the staging directory when it goes out of scope, unless it became the version.
class Staging {
 public:
  explicit Staging(fs::path path) : path_(std::move(path)) {}
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }
  void Published() { path_.clear(); }

 private:
  fs::path path_;
};

// Copies, signs and checks the version in `staging`, as the server will check it, and makes
// it durable. The staging directory is in the store, where others may write: the copy's
// digests are taken from the bytes as they are copied (and must equal the source's), and what
// is signed is those digests, never a second reading of the staged files. A file swapped in
// staging afterwards no longer matches the signature, and is refused here or by the server.
[[nodiscard]] absl::Status StageVersion(const ModelStore& store, const fs::path& source,
                                        const fs::path& staging, int64_t version,
                                        const std::string& subject, const std::string& root,
                                        const absl::StatusOr<const signing::SigningKey*>& key) {
  PILLAR_ASSIGN_OR_RETURN(std::vector<signing::FileDigest> copied,
                          signing::CopyVersion(source.string(), staging.string()));
  if (signing::RootDigest(copied) != root) {
    return absl::AbortedError(StrCat(source.string(), " changed during the push"));
  }
  if (key.ok() && *key != nullptr) {
    PILLAR_RETURN_IF_ERROR(signing::SignDigests(staging.string(), subject, copied, **key));
  }
  // It must also be this content: a staging directory replaced wholesale by another signed for
  // the same place is not what this push adds.
  absl::StatusOr<std::string> servable = store.CheckServable(staging, subject);
  if (!servable.ok()) {
    return absl::FailedPreconditionError(
        StrCat("version ", version, " would not be served: ", servable.status().message(),
               key.ok() ? "" : StrCat("; ", key.status().message())));
  }
  if (!servable->empty() && *servable != root) {
    return absl::AbortedError(
        StrCat("the staging copy was replaced during the push (it now holds sha256 ", *servable,
               ", not ", root, ")"));
  }
  // Durable before it appears: a server never sees a version whose bytes a crash could lose.
  return SyncTree(staging);
}

// Audits the version, then renames it into place. Audited before it is made: a version that
// cannot be audited is not added; past the record, a failure is recorded too, so the log then
// says the push did not happen.
[[nodiscard]] absl::Status PublishVersion(const fs::path& model_dir, const std::string& name,
                                          int64_t version, const std::string& root,
                                          Staging& staging, const StoreChange& change) {
  const std::string resource = StrCat("model:", name, "/", version);
  if (absl::Status s =
          change.audit->Record(audit::EventKind::kModel, "push", resource, StrCat("sha256 ", root));
      !s.ok()) {
    return absl::Status(s.code(), StrCat("version ", version,
                                         " is not added: its audit record was not confirmed "
                                         "durable: ",
                                         s.message()));
  }
  auto failed = [&](absl::Status status) {
    (void)change.audit->RecordFailed(audit::EventKind::kModel, "push", resource, status);
    return status;
  };
  if (absl::Status s = change.marks->NoteVersion(name, version); !s.ok()) return failed(s);
  const fs::path target = model_dir / std::to_string(version);
  Env& env = *Env::Default();
  if (absl::Status s = env.Rename(staging.path().string(), target.string()); !s.ok()) {
    return failed(s);
  }
  staging.Published();
  // Reported done only once the new name survives a power cut.
  if (absl::Status s = env.SyncDir(model_dir.string()); !s.ok()) {
    return failed(absl::Status(
        s.code(),
        StrCat("version ", version, " was added but may not survive a crash: ", s.message())));
  }
  return absl::OkStatus();
}

// Push, once the model's directory is open.
[[nodiscard]] absl::StatusOr<Pushed> PushInto(const ModelStore& store, const fs::path& model_dir,
                                              const std::string& name, const fs::path& source,
                                              const std::string& root,
                                              const absl::StatusOr<const signing::SigningKey*>& key,
                                              const StoreChange& change) {
  PILLAR_ASSIGN_OR_RETURN(ModelLock lock, ModelLock::Acquire(model_dir));
  const std::vector<int64_t> versions = VersionsIn(model_dir);
  if (std::optional<int64_t> same = SameContent(store.options(), model_dir, name, versions, root)) {
    return Pushed{.version = *same, .added = false, .root_digest = root};
  }
  PILLAR_ASSIGN_OR_RETURN(const int64_t next,
                          NextVersion(store.options(), model_dir, name, versions, *change.marks));
  RemoveDeadStaging(model_dir);
  Staging staging(model_dir / StrCat(".push-", next, "-", ::getpid()));
  PILLAR_RETURN_IF_ERROR(
      StageVersion(store, source, staging.path(), next, VersionSubject(name, next), root, key));
  PILLAR_RETURN_IF_ERROR(PublishVersion(model_dir, name, next, root, staging, change));
  return Pushed{.version = next, .added = true, .root_digest = root};
}

std::string_view ActionName(AliasAction action) {
  return action == AliasAction::kPromote ? "promote" : "rollback";
}

// The model's aliases as the move starts from: a file older than the generation seen before is
// refused like a forged one, and a refused file is replaced only when the move says so.
[[nodiscard]] absl::StatusOr<ModelAliases> AliasesToMove(const ModelStore& store,
                                                         const fs::path& model_dir,
                                                         const AliasChange& move, int64_t highest,
                                                         const StoreChange& change) {
  absl::StatusOr<ModelAliases> aliases = ReadAliases(model_dir, move.name, store.ReadTrust());
  if (aliases.ok() && aliases->generation < highest) {
    aliases = absl::PermissionDeniedError(
        StrCat(fs::path(model_dir / kAliasesFile).string(), ": generation ", aliases->generation,
               " is older than generation ", highest, " seen before"));
  }
  if (aliases.ok()) return aliases;
  if (!move.replace_aliases) {
    return absl::Status(aliases.status().code(),
                        StrCat(aliases.status().message(),
                               "; to start this model's aliases afresh with this move, give "
                               "--replace-aliases"));
  }
  if (change.on_replaced_aliases) change.on_replaced_aliases(aliases.status());
  return ModelAliases{};
}

// Where the alias goes: the version given, or for a rollback the one it named before; either
// must be a version the server would serve.
[[nodiscard]] absl::StatusOr<int64_t> MoveTarget(const ModelStore& store, const fs::path& model_dir,
                                                 const AliasChange& move,
                                                 const ModelAliases& aliases) {
  int64_t target = move.version;
  if (move.action == AliasAction::kRollback) {
    std::optional<int64_t> previous = aliases.Previous(move.alias);
    if (!previous) {
      return absl::FailedPreconditionError(StrCat("alias '", move.alias, "' of ", move.name,
                                                  " has no earlier version to go back to"));
    }
    target = *previous;
  }
  const fs::path version_dir = model_dir / std::to_string(target);
  std::error_code ec;  // the throwing overload would end the command on an unreadable store
  if (!fs::is_directory(version_dir, ec)) {
    return absl::NotFoundError(StrCat("no version ", target, " of model '", move.name, "'"));
  }
  if (absl::Status s = store.CheckServable(version_dir, VersionSubject(move.name, target)).status();
      !s.ok()) {
    return absl::FailedPreconditionError(
        StrCat("version ", target, " would not be served: ", s.message()));
  }
  return target;
}

// Audits the move, then writes aliases.json and raises the generation mark. Audited before it
// is made: a move that cannot be audited is not made.
[[nodiscard]] absl::Status CommitMove(const fs::path& model_dir, const AliasChange& move,
                                      const AliasMoved& moved, const ModelAliases& aliases,
                                      const signing::SigningKey* key, const StoreChange& change) {
  const std::string description = moved.Describe(move.alias);
  const std::string resource = StrCat("model:", move.name, "/", move.alias);
  const std::string_view action = ActionName(move.action);
  if (absl::Status s = change.audit->Record(
          audit::EventKind::kModel, action, resource,
          StrCat(description, " (generation ", aliases.generation,
                 key != nullptr ? StrCat(", signed by ", key->public_key.key_id) : "", ")"));
      !s.ok()) {
    return absl::Status(s.code(), StrCat(description,
                                         " is not made: its audit record was not confirmed "
                                         "durable: ",
                                         s.message()));
  }
  if (absl::Status s = WriteAliases(model_dir, move.name, aliases, key); !s.ok()) {
    (void)change.audit->RecordFailed(audit::EventKind::kModel, action, resource, s);
    return s;
  }
  return change.marks->Admit(move.name, aliases.generation);
}

// MoveAlias, once the model's directory is open.
[[nodiscard]] absl::StatusOr<AliasMoved> MoveAliasIn(const ModelStore& store,
                                                     const fs::path& model_dir,
                                                     const AliasChange& move,
                                                     const signing::SigningKey* key,
                                                     const StoreChange& change) {
  PILLAR_ASSIGN_OR_RETURN(ModelLock lock, ModelLock::Acquire(model_dir));
  PILLAR_ASSIGN_OR_RETURN(const int64_t highest, change.marks->Highest(move.name));
  PILLAR_ASSIGN_OR_RETURN(ModelAliases aliases,
                          AliasesToMove(store, model_dir, move, highest, change));
  PILLAR_ASSIGN_OR_RETURN(const int64_t target, MoveTarget(store, model_dir, move, aliases));
  AliasMoved moved;
  moved.to = target;
  if (auto current = aliases.targets.find(move.alias); current != aliases.targets.end()) {
    moved.from = current->second;
  }
  if (moved.from == target) return moved;  // nothing to change
  aliases.Move(move.alias, target, std::string(ActionName(move.action)), change.by,
               change.clock->UnixMicros());
  aliases.generation = std::max(aliases.generation, highest) + 1;
  PILLAR_RETURN_IF_ERROR(CommitMove(model_dir, move, moved, aliases, key, change));
  moved.changed = true;
  return moved;
}

}  // namespace

[[nodiscard]] absl::Status CheckModelName(const std::string& name) {
  if (!IsValidModelName(name)) {
    return absl::InvalidArgumentError(
        StrCat("model name '", name, "': letters, digits, '-', '_', '.', not starting with '.'"));
  }
  return absl::OkStatus();
}

std::string AliasMoved::Describe(std::string_view alias) const {
  return StrCat(alias, ": ", from ? std::to_string(*from) : "none", " -> ", to);
}

AliasTrust ModelStore::ReadTrust() const {
  return {.trusted = options_.trusted,
          .require_signature = options_.require_signatures,
          .admit_generation = {}};
}

absl::StatusOr<std::string> ModelStore::CheckServable(const fs::path& dir,
                                                      const std::string& subject) const {
  std::string toml;
  std::string root;
  if (options_.require_signatures) {
    if (options_.trusted.empty()) {
      return absl::FailedPreconditionError(
          "signatures are required and no trusted_keys are configured");
    }
    PILLAR_ASSIGN_OR_RETURN(
        signing::VerifiedModel verified,
        signing::VerifyModel(dir.string(), options_.trusted,
                             {.expected_name = subject, .keep = {"model.toml"}, .after_read = {}}));
    if (!verified.contents.contains("model.toml")) {
      return absl::NotFoundError(StrCat(dir.string(), ": no model.toml among the signed files"));
    }
    toml = std::move(verified.contents["model.toml"]);
    root = std::move(verified.root_digest);
  } else {
    using Files = std::map<std::string, std::string, std::less<>>;
    PILLAR_ASSIGN_OR_RETURN(Files files, signing::ReadModelFiles(dir.string(), {"model.toml"}));
    if (!files.contains("model.toml")) {
      return absl::NotFoundError(StrCat(dir.string(), ": no model.toml"));
    }
    toml = std::move(files["model.toml"]);
  }
  PILLAR_RETURN_IF_ERROR(ModelConfig::Parse(toml, (dir / "model.toml").string()).status());
  return root;
}

absl::StatusOr<Pushed> ModelStore::Push(const std::string& name, const fs::path& source,
                                        const StoreChange& change) const {
  PILLAR_RETURN_IF_ERROR(CheckModelName(name));
  PILLAR_RETURN_IF_ERROR(CheckSource(source));
  // Without a key the push goes on: the check of the staged copy then says what is missing.
  const absl::StatusOr<const signing::SigningKey*> key = ChangeKey(options_, change);
  PILLAR_ASSIGN_OR_RETURN(std::vector<signing::FileDigest> files, signing::DigestDirectory(source));
  const std::string root = signing::RootDigest(files);
  PILLAR_ASSIGN_OR_RETURN(ModelDirectory dir,
                          ModelDirectory::Open(options_.root, name, /*create=*/true));
  absl::StatusOr<Pushed> pushed = PushInto(*this, dir.path(), name, source, root, key, change);
  if (!pushed.ok()) return dir.Shown(pushed.status());
  return pushed;
}

absl::StatusOr<AliasMoved> ModelStore::MoveAlias(const AliasChange& move,
                                                 const StoreChange& change) const {
  PILLAR_RETURN_IF_ERROR(CheckModelName(move.name));
  if (!IsValidAliasName(move.alias)) {
    return absl::InvalidArgumentError(
        StrCat("alias '", move.alias, "': 1 to 64 of a-z, 0-9, '_', '-', starting with a letter"));
  }
  PILLAR_ASSIGN_OR_RETURN(const signing::SigningKey* key, ChangeKey(options_, change));
  PILLAR_ASSIGN_OR_RETURN(ModelDirectory dir,
                          ModelDirectory::Open(options_.root, move.name, /*create=*/false));
  // The notice of a refused aliases.json names the store's path, not the descriptor's.
  StoreChange shown = change;
  if (change.on_replaced_aliases) {
    shown.on_replaced_aliases = [&](const absl::Status& why) {
      change.on_replaced_aliases(dir.Shown(why));
    };
  }
  absl::StatusOr<AliasMoved> moved = MoveAliasIn(*this, dir.path(), move, key, shown);
  if (!moved.ok()) return dir.Shown(moved.status());
  return moved;
}

}  // namespace pillar::models
