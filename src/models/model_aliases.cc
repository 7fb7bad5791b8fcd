#include "models/model_aliases.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <simdjson.h>

#include "absl/time/time.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/json_writer.h"
#include "common/strings.h"

namespace pillar::models {
namespace {

constexpr std::uintmax_t kMaxAliasesBytes = 16 << 20;

absl::Status Malformed(const std::filesystem::path& path, std::string_view what) {
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

absl::StatusOr<ModelAliases> ReadAliases(const std::filesystem::path& model_dir) {
  const std::filesystem::path path = model_dir / kAliasesFile;
  absl::StatusOr<std::string> text = ReadSmallFile(path, kMaxAliasesBytes);
  if (!text.ok()) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return ModelAliases{};
    return text.status();
  }
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  simdjson::dom::object targets;
  simdjson::dom::array history;
  if (parser.parse(*text).get(root) != simdjson::SUCCESS ||
      root["aliases"].get(targets) != simdjson::SUCCESS ||
      root["history"].get(history) != simdjson::SUCCESS) {
    return Malformed(path, "not an aliases file (an object with \"aliases\" and \"history\")");
  }
  ModelAliases aliases;
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
        entry["to"].get(move.to) != simdjson::SUCCESS ||
        entry["by"].get(by) != simdjson::SUCCESS ||
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

absl::Status WriteAliases(const std::filesystem::path& model_dir, const ModelAliases& aliases) {
  JsonWriter w(1024);
  w.BeginObject();
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
  std::string text = std::move(w).Take();
  text += '\n';
  const std::filesystem::path target = model_dir / kAliasesFile;
  const std::string tmp = target.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), target.c_str()) != 0) {
    return absl::InternalError(StrCat("cannot write ", target.string(), ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelLock> ModelLock::Acquire(const std::filesystem::path& model_dir) {
  const std::string path = (model_dir / ".lock").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(StrCat("cannot open ", path, ": ", std::strerror(errno)));
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      ::close(fd);
      return absl::InternalError(StrCat("cannot lock ", path, ": ", std::strerror(errno)));
    }
  }
  return ModelLock(fd);
}

ModelLock::~ModelLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace pillar::models
