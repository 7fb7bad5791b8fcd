// A model's aliases ("prod", "canary" -> a version) and the history of every move, kept in
// `<store>/<model>/aliases.json` (docs/formats/model_store.md). `pillar model promote` and
// `rollback` change it under the model's lock; a running server reads it on each store scan and
// switches traffic atomically.
//
// Where signatures are required the file is a DSSE envelope signed by a trusted key, naming its
// model and a generation that grows by one with every move: a writer of the store without a key
// can neither move an alias nor put back an older signed file (the server remembers the highest
// generation it has seen, see AliasTrust::admit_generation).
//
//   PILLAR_ASSIGN_OR_RETURN(ModelAliases a, ReadAliases(store / "digits", "digits", trust));
//   a.Move("prod", 3, "promote", "local:ana", now_us);
//   PILLAR_RETURN_IF_ERROR(WriteAliases(store / "digits", "digits", a, &signing_key));
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/env.h"
#include "signing/signing_key.h"

namespace pillar::models {

inline constexpr std::string_view kAliasesFile = "aliases.json";
// The payload type of a signed aliases.json envelope.
inline constexpr std::string_view kAliasesPayloadType = "application/vnd.pillar.aliases+json";

struct AliasMove {
  std::string alias;
  std::string action;           // "promote" or "rollback"
  std::optional<int64_t> from;  // none: the alias is new
  int64_t to = 0;
  std::string by;  // who: "local:<user>", a principal id
  int64_t time_us = 0;
};

struct ModelAliases {
  std::map<std::string, int64_t> targets;
  std::vector<AliasMove> history;  // oldest first
  // Counts the file's writes; a signed file's is above 0. Move() does not change it: the
  // writer sets the next one.
  int64_t generation = 0;
  std::string signed_by;  // the key id, when read from a signed file

  // Points `alias` at `version` and appends the move to the history.
  void Move(const std::string& alias, int64_t version, std::string action, std::string by,
            int64_t time_us);
  // The version `alias` pointed to before its newest move; none when it has not moved.
  std::optional<int64_t> Previous(const std::string& alias) const;
};

// What an aliases file must satisfy to be used.
struct AliasTrust {
  std::vector<signing::PublicKey> trusted;
  // Refuse a file that no trusted key signed ([repository] require_signatures).
  bool require_signature = false;
  // Called with each model's generation (0 when it has no aliases file): an error refuses the
  // file. The server remembers the highest generation it has seen here, so an older signed file
  // put back (or the file removed) is refused as a replay. Null: no memory.
  std::function<absl::Status(std::string_view model, int64_t generation)> admit_generation;
};

// Alias names: 1 to 64 of [a-z0-9_-], starting with a letter (never a version number).
bool IsValidAliasName(std::string_view alias);

// An absent file is no aliases (generation 0); a malformed, unsigned (when a signature is
// required), foreign (signed for another model) or replayed file is an error naming the file.
[[nodiscard]] absl::StatusOr<ModelAliases> ReadAliases(const std::filesystem::path& model_dir,
                                                       std::string_view model,
                                                       const AliasTrust& trust);
// Replaces the file through PublishAtomically on `env` (durable once it returns), with
// `aliases.generation` as written; signed with `key` when given.
[[nodiscard]] absl::Status WriteAliases(const std::filesystem::path& model_dir,
                                        std::string_view model, const ModelAliases& aliases,
                                        const signing::SigningKey* key, Env& env = *Env::Default());

// An exclusive lock on a model directory for read-modify-write of its aliases and versions
// (flock on `<model>/.lock`); released when destroyed.
class ModelLock {
 public:
  // Waits at most `wait` for another holder (Unavailable after it).
  [[nodiscard]] static absl::StatusOr<ModelLock> Acquire(const std::filesystem::path& model_dir,
                                                         absl::Duration wait = absl::Seconds(30));
  ModelLock(ModelLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  ModelLock& operator=(ModelLock&&) = delete;
  ~ModelLock();

 private:
  explicit ModelLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace pillar::models
