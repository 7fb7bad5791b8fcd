// A model's aliases ("prod", "canary" -> a version) and the history of every move, kept in
// `<store>/<model>/aliases.json` (docs/formats/model_store.md). `pillar model promote` and
// `rollback` change it under the model's lock; a running server reads it on each store scan and
// switches traffic atomically.
//
//   PILLAR_ASSIGN_OR_RETURN(ModelAliases a, ReadAliases(store / "digits"));
//   PILLAR_RETURN_IF_ERROR(a.Move("prod", 3, "promote", "local:ana", now_us));
//   PILLAR_RETURN_IF_ERROR(WriteAliases(store / "digits", a));
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pillar::models {

inline constexpr std::string_view kAliasesFile = "aliases.json";

struct AliasMove {
  std::string alias;
  std::string action;           // "promote" or "rollback"
  std::optional<int64_t> from;  // none: the alias is new
  int64_t to = 0;
  std::string by;               // who: "local:<user>", a principal id
  int64_t time_us = 0;
};

struct ModelAliases {
  std::map<std::string, int64_t> targets;
  std::vector<AliasMove> history;  // oldest first

  // Points `alias` at `version` and appends the move to the history.
  void Move(const std::string& alias, int64_t version, std::string action, std::string by,
            int64_t time_us);
  // The version `alias` pointed to before its newest move; none when it has not moved.
  std::optional<int64_t> Previous(const std::string& alias) const;
};

// Alias names: 1 to 64 of [a-z0-9_-], starting with a letter (never a version number).
bool IsValidAliasName(std::string_view alias);

// An absent file is no aliases; a malformed one is an error naming the file.
absl::StatusOr<ModelAliases> ReadAliases(const std::filesystem::path& model_dir);
// Replaces the file atomically (write, fsync, rename).
absl::Status WriteAliases(const std::filesystem::path& model_dir, const ModelAliases& aliases);

// An exclusive lock on a model directory for read-modify-write of its aliases and versions
// (flock on `<model>/.lock`); released when destroyed.
class ModelLock {
 public:
  static absl::StatusOr<ModelLock> Acquire(const std::filesystem::path& model_dir);
  ModelLock(ModelLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  ModelLock& operator=(ModelLock&&) = delete;
  ~ModelLock();

 private:
  explicit ModelLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace pillar::models
