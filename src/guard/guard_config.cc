#include "guard/guard_config.h"

#include <algorithm>
#include <filesystem>

#include "common/crypto.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/toml_parse.h"

namespace pillar::guard {
namespace {

constexpr uintmax_t kMaxConfigBytes = 1 << 20;

[[nodiscard]] absl::Status ReadRule(TomlSection& section, EntityRule& rule) {
  PILLAR_RETURN_IF_ERROR(section.ReadEnum(
      "action", rule.action,
      {{"allow", Action::kAllow}, {"redact", Action::kRedact}, {"block", Action::kBlock}}));
  PILLAR_RETURN_IF_ERROR(section.ReadEnum(
      "redaction", rule.redaction,
      {{"tag", Redaction::kTag}, {"mask", Redaction::kMask}, {"hash", Redaction::kHash}}));
  return section.ReadDouble("min_score", rule.min_score, 0.0, 1.0);
}

}  // namespace

std::string_view ActionName(Action action) {
  switch (action) {
    case Action::kAllow:
      return "allow";
    case Action::kRedact:
      return "redact";
    case Action::kBlock:
      return "block";
  }
  return "allow";
}

GuardConfig::GuardConfig() {
  rule(EntityType::kSecret).action = Action::kBlock;
  hash_key = RandomBytes(32);
}

double GuardConfig::LowestScore() const {
  double lowest = 1.0;
  for (EntityType type : kAllEntityTypes) {
    lowest = std::min(lowest, rule(type).min_score);
  }
  return lowest;
}

[[nodiscard]] absl::StatusOr<GuardConfig> ParseGuardConfig(const toml::table* guard,
                                                           std::string_view source,
                                                           const std::string& base) {
  GuardConfig config;
  TomlSection section(guard, "guard", source);
  // The table's own keys are every type's defaults; [guard.entities.TYPE] overrides them.
  EntityRule defaults;
  const bool action_set = section.Contains("action");
  PILLAR_RETURN_IF_ERROR(ReadRule(section, defaults));
  for (EntityType type : kAllEntityTypes) {
    const Action keep = config.rule(type).action;
    config.rule(type) = defaults;
    if (!action_set) config.rule(type).action = keep;
  }
  std::string key_file;
  PILLAR_RETURN_IF_ERROR(section.ReadPath("hash_key_file", key_file, base));
  if (section.Contains("hash_key_file") && key_file.empty()) {
    return absl::InvalidArgumentError(
        StrCat(source, ": [guard] hash_key_file is empty (leave it out for a random key)"));
  }
  if (!key_file.empty()) {
    PILLAR_ASSIGN_OR_RETURN(std::string key, ReadSecretFile(key_file, 4096));
    if (key.size() < 16) {
      return absl::InvalidArgumentError(
          StrCat(source, ": [guard] hash_key_file ", key_file, " holds fewer than 16 bytes"));
    }
    config.hash_key = std::move(key);
  }
  section.Allow("entities");
  if (guard != nullptr) {
    if (const toml::node* node = guard->get("entities"); node != nullptr) {
      const toml::table* entities = node->as_table();
      if (entities == nullptr) {
        return absl::InvalidArgumentError(StrCat(source, ": [guard] entities must be a table"));
      }
      for (const auto& [name, value] : *entities) {
        const std::optional<EntityType> type = ParseEntityName(name.str());
        if (!type) {
          return absl::InvalidArgumentError(StrCat(source, ": [guard.entities] unknown type '",
                                                   name.str(), "' (see docs/guard.md)"));
        }
        TomlSection entity(value.as_table(), StrCat("guard.entities.", name.str()), source);
        if (value.as_table() == nullptr) {
          return absl::InvalidArgumentError(
              StrCat(source, ": [guard.entities] ", name.str(), " must be a table"));
        }
        PILLAR_RETURN_IF_ERROR(ReadRule(entity, config.rule(*type)));
        PILLAR_RETURN_IF_ERROR(entity.CheckNoUnknownKeys());
      }
    }
  }
  PILLAR_RETURN_IF_ERROR(section.CheckNoUnknownKeys());
  return config;
}

[[nodiscard]] absl::StatusOr<GuardConfig> LoadGuardConfig(const std::string& path) {
  PILLAR_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, kMaxConfigBytes));
  PILLAR_ASSIGN_OR_RETURN(toml::table table, ParseToml(text, path));
  const toml::node* guard = table.get("guard");
  if (guard != nullptr && guard->as_table() == nullptr) {
    return absl::InvalidArgumentError(StrCat(path, ": [guard] must be a table"));
  }
  const std::string base = std::filesystem::path(path).parent_path().string();
  return ParseGuardConfig(guard == nullptr ? nullptr : guard->as_table(), path, base);
}

}  // namespace pillar::guard
