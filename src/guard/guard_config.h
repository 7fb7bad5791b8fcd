// What the guard does with each kind of finding: allow it, redact it (with a type tag such as
// <EMAIL_ADDRESS>, a mask, or a keyed hash), or block the text. Read from the [guard] table of a
// TOML file:
//
//   [guard]
//   min_score = 0.5            # findings scored below are ignored
//   action = "redact"          # every type: "allow", "redact" or "block"
//   redaction = "tag"          # "tag", "mask" or "hash"
//   hash_key_file = "guard.key"  # the HMAC key for "hash" (0600); a random key per process if
//   absent [guard.entities.CREDIT_CARD] action = "block" [guard.entities.EMAIL_ADDRESS] redaction =
//   "mask" min_score = 0.8
//
// Defaults when nothing is said: every personal-data type redacted with its tag, SECRET blocked
// (a credential in a prompt is refused, not passed on in part), findings scored under 0.5
// ignored, but PT_NIF's under 0.3 (a bare NIF is found).
#pragma once

#include <toml++/toml.h>

#include <array>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "guard/classifier.h"
#include "guard/deny_list.h"
#include "guard/entity.h"
#include "guard/injection.h"

namespace pillar::guard {

// In order of strictness: where findings merge, the greater applies.
enum class Action { kAllow, kRedact, kBlock };
enum class Redaction { kTag, kMask, kHash };

std::string_view ActionName(Action action);

struct EntityRule {
  Action action = Action::kRedact;
  Redaction redaction = Redaction::kTag;
  double min_score = 0.5;
};

struct GuardConfig {
  std::array<EntityRule, kAllEntityTypes.size()> rules;
  // Serving (pillar serve's [guard]): whether a language model's prompts and answers are
  // screened, and what a streamed answer holds back so that a value split across chunks is
  // seen whole (guard/screen.h ScreenPrefix).
  bool prompts = true;
  bool answers = true;
  int64_t hold_back_bytes = 128;
  // answer_controls = "strip" (true) or "keep": whether an answer's display controls are removed
  // before it is screened and sent (guard/display_controls.h).
  bool strip_answer_controls = true;
  // [[guard.deny]]: words and patterns matched in prompts and answers (null: none), and
  // [guard.injection]: the prompt-injection heuristics, over what users and tools wrote.
  std::shared_ptr<const DenyList> deny;
  InjectionConfig injection;
  // [guard.classifier]: a model that judges what users and tools wrote (guard/classifier.h).
  ClassifierConfig classifier;
  // [guard.models.NAME] and [guard.tenants.NAME]: the same keys, over this table's, for one
  // model or one tenant's principals (a model's table first, then a tenant's).
  std::map<std::string, std::shared_ptr<const GuardConfig>, std::less<>> models;
  std::map<std::string, std::shared_ptr<const GuardConfig>, std::less<>> tenants;
  // The key of "hash" redactions: the same value hashes the same within one key, so redacted
  // texts can still be joined on it, and without the key the hash cannot be reversed by trying
  // every phone number.
  std::string hash_key;

  GuardConfig();
  const EntityRule& rule(EntityType type) const { return rules[size_t(type)]; }
  EntityRule& rule(EntityType type) { return rules[size_t(type)]; }
  // The lowest min_score of any type: what the recognizers must report. Findings are resolved
  // (overlaps, context) before actions are applied, so an allowed type is found like the rest.
  double LowestScore() const;
  // The configuration for a call to `model` by a principal of `tenant`.
  const GuardConfig& For(std::string_view model, std::string_view tenant) const;
};

// `guard` is the [guard] table (absent: the defaults); `base` resolves a relative key file.
// `inherited`: the values a [guard.models.NAME] or [guard.tenants.NAME] table starts from.
[[nodiscard]] absl::StatusOr<GuardConfig> ParseGuardConfig(const toml::table* guard,
                                                           std::string_view source,
                                                           const std::string& base,
                                                           const GuardConfig* inherited = nullptr);
// Reads the [guard] table of the TOML file at `path` (a pillar.toml, or a file of its own).
[[nodiscard]] absl::StatusOr<GuardConfig> LoadGuardConfig(const std::string& path);

}  // namespace pillar::guard
