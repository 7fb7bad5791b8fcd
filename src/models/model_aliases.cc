#include "models/model_aliases.h"

#include <fcntl.h>
#include <simdjson.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/directory.h"
#include "common/files.h"
#include "common/json_writer.h"
#include "common/strings.h"
#include "signing/envelope.h"

namespace pillar::models {
namespace {

constexpr std::uintmax_t kMaxAliasesBytes = 16 << 20;

[[nodiscard]] absl::Status Malformed(const std::filesystem::path& path, std::string_view what) {
  return absl::DataLossError(StrCat(path.string(), ": ", what));
}

}  // namespace

void ModelAliases::Move(const std::string& alias, int64_t version, std::string action,
                        std::string by, int64_t time_us) {
  std::optional<int64_t> from;
  if (auto it = targets.find(alias); it != targets.end()) from = it->second;
  targets[alias] = version;
  history.push_back({.alias = alias,
                     .action = std::move(action),
                     .from = from,
                     .to = version,
                     .by = std::move(by),
                     .time_us = time_us});
}

std::optional<int64_t> ModelAliases::Previous(const std::string& alias) const {
  for (auto it = history.rbegin(); it != history.rend(); ++it) {
    if (it->alias == alias) return it->from;
  }
  return std::nullopt;
}

bool IsValidAliasName(std::string_view alias) {
  if (alias.empty() || alias.size() > 64 || alias[0] < 'a' || alias[0] > 'z') return false;
  for (char c : alias) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  }
  return true;
}

namespace {

// Parses the aliases document (the payload of a signed file, or an unsigned file's text).
[[nodiscard]] absl::StatusOr<ModelAliases> ParseAliases(const std::filesystem::path& path,
                                                        std::string_view text, std::string* model) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  simdjson::dom::object targets;
  simdjson::dom::array history;
  if (parser.parse(text.data(), text.size()).get(root) != simdjson::SUCCESS ||
      root["aliases"].get(targets) != simdjson::SUCCESS ||
      root["history"].get(history) != simdjson::SUCCESS) {
    return Malformed(path, "not an aliases file (an object with \"aliases\" and \"history\")");
  }
  ModelAliases aliases;
  std::string_view named;
  if (root["model"].get(named) == simdjson::SUCCESS) *model = std::string(named);
  if (root["generation"].error() != simdjson::NO_SUCH_FIELD &&
      (root["generation"].get(aliases.generation) != simdjson::SUCCESS || aliases.generation < 0)) {
    return Malformed(path, "generation must be an integer >= 0");
  }
  for (auto [alias, version] : targets) {
    int64_t v;
    if (!IsValidAliasName(alias) || version.get(v) != simdjson::SUCCESS || v <= 0) {
      return Malformed(path, StrCat("alias '", alias, "' needs a valid name and a version > 0"));
    }
    aliases.targets[std::string(alias)] = v;
  }
  for (simdjson::dom::element entry : history) {
    AliasMove move;
    std::string_view alias, action, by, time;
    int64_t from = 0;
    if (entry["alias"].get(alias) != simdjson::SUCCESS ||
        entry["action"].get(action) != simdjson::SUCCESS ||
        entry["to"].get(move.to) != simdjson::SUCCESS || entry["by"].get(by) != simdjson::SUCCESS ||
        entry["time"].get(time) != simdjson::SUCCESS) {
      return Malformed(path, "a history entry lacks alias, action, to, by or time");
    }
    if (entry["from"].get(from) == simdjson::SUCCESS) move.from = from;
    absl::Time t;
    std::string error;
    if (!absl::ParseTime(absl::RFC3339_full, std::string(time), &t, &error)) {
      return Malformed(path, StrCat("bad time '", time, "' in the history"));
    }
    move.alias = std::string(alias);
    move.action = std::string(action);
    move.by = std::string(by);
    move.time_us = absl::ToUnixMicros(t);
    aliases.history.push_back(std::move(move));
  }
  return aliases;
}

std::string AliasesDocument(std::string_view model, const ModelAliases& aliases) {
  JsonWriter w(1024);
  w.BeginObject();
  w.Key("model");
  w.String(model);
  w.Key("generation");
  w.Int(aliases.generation);
  w.Key("aliases");
  w.BeginObject();
  for (const auto& [alias, version] : aliases.targets) {
    w.Key(alias);
    w.Int(version);
  }
  w.EndObject();
  w.Key("history");
  w.BeginArray();
  for (const AliasMove& m : aliases.history) {
    w.BeginObject();
    w.Key("alias");
    w.String(m.alias);
    w.Key("action");
    w.String(m.action);
    w.Key("from");
    if (m.from) {
      w.Int(*m.from);
    } else {
      w.Null();
    }
    w.Key("to");
    w.Int(m.to);
    w.Key("by");
    w.String(m.by);
    w.Key("time");
    w.String(FormatUtcMicros(m.time_us));
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return std::move(w).Take();
}

}  // namespace

[[nodiscard]] absl::StatusOr<ModelAliases> ReadAliases(const std::filesystem::path& model_dir,
                                                       std::string_view model,
                                                       const AliasTrust& trust) {
  const std::filesystem::path path = model_dir / kAliasesFile;
  absl::StatusOr<ModelAliases> aliases = [&]() -> absl::StatusOr<ModelAliases> {
    absl::StatusOr<Directory> dir = Directory::Open(model_dir.string());
    if (!dir.ok()) return dir.status();
    absl::StatusOr<std::string> text = ReadFileBeneath(*dir, kAliasesFile, kMaxAliasesBytes);
    if (absl::IsNotFound(text.status())) return ModelAliases{};
    if (!text.ok()) return text.status();
    std::string named;
    if (!signing::LooksLikeEnvelope(*text)) {
      if (trust.require_signature) {
        return absl::PermissionDeniedError(
            StrCat(path.string(),
                   ": not signed; aliases are moved with `pillar model promote` and a "
                   "signing key when signatures are required"));
      }
      absl::StatusOr<ModelAliases> parsed = ParseAliases(path, *text, &named);
      if (parsed.ok() && !named.empty() && named != model) {
        return Malformed(path, StrCat("names model '", named, "', not '", model, "'"));
      }
      return parsed;
    }
    absl::StatusOr<signing::OpenedEnvelope> envelope =
        signing::OpenEnvelope(*text, kAliasesPayloadType, trust.trusted, path.string());
    if (!envelope.ok()) return envelope.status();
    absl::StatusOr<ModelAliases> parsed = ParseAliases(path, envelope->payload, &named);
    if (!parsed.ok()) return parsed.status();
    // A signed file speaks for one model: copied into another model's directory, it is refused.
    if (named != model) {
      return absl::PermissionDeniedError(StrCat(path.string(), ": signed for model '",
                                                CutForLog(named, 128), "', not '", model, "'"));
    }
    if (parsed->generation < 1) return Malformed(path, "a signed file needs a generation >= 1");
    parsed->signed_by = envelope->key_id;
    return parsed;
  }();
  if (!aliases.ok()) return aliases.status();
  if (trust.admit_generation) {
    if (absl::Status s = trust.admit_generation(model, aliases->generation); !s.ok()) {
      return absl::Status(s.code(), StrCat(path.string(), ": ", s.message()));
    }
  }
  return aliases;
}

[[nodiscard]] absl::Status WriteAliases(const std::filesystem::path& model_dir,
                                        std::string_view model, const ModelAliases& aliases,
                                        const signing::SigningKey* key, Env& env) {
  const std::string document = AliasesDocument(model, aliases);
  std::string text =
      key == nullptr ? document : signing::SealEnvelope(kAliasesPayloadType, document, *key);
  text += '\n';
  // PublishAtomically removes whatever the store's writers left at the temp name (a FIFO an
  // open would wait on forever while holding the model's lock, a link, a hard link to a file
  // that must not be truncated) and creates a new file; the directory is synced, so a move
  // reported done survives a power cut.
  return PublishAtomically(env, (model_dir / kAliasesFile).string(), text, 0644);
}

absl::StatusOr<ModelLock> ModelLock::Acquire(const std::filesystem::path& model_dir,
                                             absl::Duration wait) {
  const std::string path = (model_dir / ".lock").string();
  // Not through a link: whoever can write the store could otherwise make the operator's CLI
  // create (or lock) a file anywhere it can write.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return absl::InternalError(StrCat("cannot open ", path, ": ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(StrCat(path, ": not a regular file"));
  }
  // Bounded: anyone who can write the store can also take this lock and never let go, and a
  // command waiting for ever would hold its own locks (and its operator) with it.
  const absl::Time deadline = absl::Now() + wait;
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      ::close(fd);
      return absl::InternalError(StrCat("cannot lock ", path, ": ", std::strerror(errno)));
    }
    if (absl::Now() >= deadline) {
      ::close(fd);
      return absl::UnavailableError(
          StrCat(path, " is held by another process (a push or an alias move?) for more than ",
                 absl::FormatDuration(wait), "; try again"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return ModelLock(fd);
}

ModelLock::~ModelLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace pillar::models
