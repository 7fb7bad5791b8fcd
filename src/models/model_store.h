// The model store's write protocol (docs/formats/model_store.md): what `pillar model push`,
// `promote` and `rollback` do to the store a server serves from.
//
// - Push adds a version directory as a new, immutable version identified by its content (the
//   root digest over its files): pushing the same bytes twice is one version. The copy is
//   staged in the model's directory, signed for its place ("<model>/<version>"), checked as the
//   server would check it, made durable, audited, and only then renamed into place. Version
//   numbers are never reused (HighWaterMarks).
// - MoveAlias points an alias at a version (promote) or back at the one it named before
//   (rollback). aliases.json is re-signed at every move with a generation one above any seen
//   before, and every move is kept in it with who and when, and audited before it is made.
// Both hold the model's lock (ModelLock), and reach the model's directory through a descriptor,
// so that a writer of the store cannot swap it for a link between two steps.
//
//   ModelStore store({.root = "models", .trusted = keys, .require_signatures = true});
//   PILLAR_ASSIGN_OR_RETURN(Pushed pushed, store.Push("digits", "build/digits", change));
//   PILLAR_ASSIGN_OR_RETURN(AliasMoved moved,
//                           store.MoveAlias({.name = "digits", .alias = "prod",
//                                            .action = AliasAction::kPromote,
//                                            .version = pushed.version}, change));
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "audit/change_audit.h"
#include "common/clock.h"
#include "models/high_water_marks.h"
#include "models/model_aliases.h"
#include "signing/signing_key.h"

namespace pillar::models {

struct ModelStoreOptions {
  std::filesystem::path root;
  std::vector<signing::PublicKey> trusted;
  bool require_signatures = true;
};

// What a change needs beyond the store: who signs it, where it is audited, the marks that
// number it, and whom it is recorded as made by.
struct StoreChange {
  // Null: the change is not signed (refused where signatures are required).
  const signing::SigningKey* key = nullptr;
  audit::ChangeAudit* audit = nullptr;  // required
  HighWaterMarks* marks = nullptr;      // required
  std::string by;                       // e.g. "local:ana"
  const Clock* clock = &SystemClock();
  // Told why aliases.json was set aside when a move starts it afresh (replace_aliases).
  std::function<void(const absl::Status&)> on_replaced_aliases;
};

struct Pushed {
  int64_t version = 0;
  bool added = false;  // false: the same content was there already as `version`
  std::string root_digest;
};

enum class AliasAction { kPromote, kRollback };

struct AliasChange {
  std::string name;
  std::string alias = "prod";
  AliasAction action = AliasAction::kPromote;
  int64_t version = 0;  // promote: where to; rollback: ignored
  // When aliases.json is refused (unsigned, forged, replayed): start the model's aliases afresh
  // with this move instead of failing.
  bool replace_aliases = false;
};

struct AliasMoved {
  std::optional<int64_t> from;
  int64_t to = 0;
  bool changed = false;  // false: the alias named `to` already
  // "prod: 2 -> 3"
  std::string Describe(std::string_view alias) const;
};

class ModelStore {
 public:
  explicit ModelStore(ModelStoreOptions options) : options_(std::move(options)) {}

  [[nodiscard]] absl::StatusOr<Pushed> Push(const std::string& name,
                                            const std::filesystem::path& source,
                                            const StoreChange& change) const;
  [[nodiscard]] absl::StatusOr<AliasMoved> MoveAlias(const AliasChange& move,
                                                     const StoreChange& change) const;

  // How reads of aliases.json judge it (signatures only; no generation marks).
  AliasTrust ReadTrust() const;
  const ModelStoreOptions& options() const { return options_; }

  // What the server would check before loading, from the same bytes it would load: a version
  // it would refuse at `subject` ("<model>/<version>") is refused here too. Returns the root
  // digest the signature names (empty where signatures are not required).
  [[nodiscard]] absl::StatusOr<std::string> CheckServable(const std::filesystem::path& dir,
                                                          const std::string& subject) const;

 private:
  ModelStoreOptions options_;
};

// Model names: letters, digits, '-', '_', '.', not starting with '.'.
[[nodiscard]] absl::Status CheckModelName(const std::string& name);

}  // namespace pillar::models
