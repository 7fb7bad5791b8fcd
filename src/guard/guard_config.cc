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
  // Nine bare digits that pass the NIF's check (0.35; 0.3 grouped in threes) are found, as bare
  // CPFs and CNPJs are: a tax number passed on is the greater harm than an ordinary number that
  // passes the check by chance (about one in fifteen) redacted. docs/guard.md, "Context".
  rule(EntityType::kPtNif).min_score = 0.3;
  hash_key = RandomBytes(32);
}

double GuardConfig::LowestScore() const {
  double lowest = 1.0;
  for (EntityType type : kAllEntityTypes) {
    lowest = std::min(lowest, rule(type).min_score);
  }
  return lowest;
}

const GuardConfig& GuardConfig::For(std::string_view model, std::string_view tenant) const {
  if (auto it = models.find(model); it != models.end()) return *it->second;
  if (auto it = tenants.find(tenant); it != tenants.end()) return *it->second;
  return *this;
}

namespace {

// [guard.entities.TYPE]: one type's rule over the table's.
[[nodiscard]] absl::Status ReadEntities(const toml::table* guard, std::string_view source,
                                        GuardConfig& config) {
  const toml::node* node = guard == nullptr ? nullptr : guard->get("entities");
  if (node == nullptr) return absl::OkStatus();
  const toml::table* entities = node->as_table();
  if (entities == nullptr) {
    return absl::InvalidArgumentError(StrCat(source, ": [guard] entities must be a table"));
  }
  for (const auto& [name, value] : *entities) {
    const std::optional<EntityType> type = ParseEntityName(name.str());
    if (!type) {
      return absl::InvalidArgumentError(
          StrCat(source, ": [guard.entities] unknown type '", name.str(), "' (see docs/guard.md)"));
    }
    TomlSection entity(value.as_table(), StrCat("guard.entities.", name.str()), source);
    if (value.as_table() == nullptr) {
      return absl::InvalidArgumentError(
          StrCat(source, ": [guard.entities] ", name.str(), " must be a table"));
    }
    PILLAR_RETURN_IF_ERROR(ReadRule(entity, config.rule(*type)));
    PILLAR_RETURN_IF_ERROR(entity.CheckNoUnknownKeys());
  }
  return absl::OkStatus();
}

// [[guard.deny]]: the rules, which replace the inherited ones when the table has any.
[[nodiscard]] absl::Status ReadDeny(const toml::table* guard, std::string_view source,
                                    GuardConfig& config) {
  const toml::node* node = guard == nullptr ? nullptr : guard->get("deny");
  if (node == nullptr) return absl::OkStatus();
  const toml::array* tables = node->as_array();
  if (tables == nullptr || !tables->is_array_of_tables()) {
    return absl::InvalidArgumentError(
        StrCat(source, ": [guard] deny must be an array of tables: [[guard.deny]]"));
  }
  std::vector<DenyRule> rules;
  for (const toml::node& item : *tables) {
    DenyRule rule;
    TomlSection table(item.as_table(), StrCat("guard.deny #", rules.size() + 1), source);
    PILLAR_RETURN_IF_ERROR(table.ReadString("name", rule.name));
    if (rule.name.empty() || rule.name.size() > 64 ||
        rule.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                    "0123456789-_.") != std::string::npos) {
      return absl::InvalidArgumentError(
          StrCat(source, ": [[guard.deny]] #", rules.size() + 1,
                 ": name must be 1 to 64 letters, digits, '-', '_' or '.'"));
    }
    PILLAR_RETURN_IF_ERROR(table.ReadStrings("words", rule.words));
    PILLAR_RETURN_IF_ERROR(table.ReadStrings("patterns", rule.patterns));
    PILLAR_RETURN_IF_ERROR(table.ReadEnum(
        "action", rule.action, {{"flag", DenyAction::kFlag}, {"block", DenyAction::kBlock}}));
    PILLAR_RETURN_IF_ERROR(table.CheckNoUnknownKeys());
    rules.push_back(std::move(rule));
  }
  absl::StatusOr<std::shared_ptr<const DenyList>> list = DenyList::Build(std::move(rules));
  if (!list.ok()) {
    return absl::InvalidArgumentError(StrCat(source, ": [[guard.deny]] ", list.status().message()));
  }
  config.deny = std::move(*list);
  return absl::OkStatus();
}

// [guard.injection], over the inherited settings.
[[nodiscard]] absl::Status ReadInjection(const toml::table* guard, std::string_view source,
                                         InjectionConfig& out) {
  const toml::node* node = guard == nullptr ? nullptr : guard->get("injection");
  if (node == nullptr) return absl::OkStatus();
  if (node->as_table() == nullptr) {
    return absl::InvalidArgumentError(StrCat(source, ": [guard] injection must be a table"));
  }
  TomlSection table(node->as_table(), "guard.injection", source);
  PILLAR_RETURN_IF_ERROR(table.ReadBool("enabled", out.enabled));
  PILLAR_RETURN_IF_ERROR(table.ReadDouble("threshold", out.threshold, 0.01, 1));
  PILLAR_RETURN_IF_ERROR(table.ReadEnum(
      "action", out.action, {{"flag", DenyAction::kFlag}, {"block", DenyAction::kBlock}}));
  return table.CheckNoUnknownKeys();
}

// [guard.classifier], over the inherited settings.
[[nodiscard]] absl::Status ReadClassifier(const toml::table* guard, std::string_view source,
                                          ClassifierConfig& out) {
  const toml::node* node = guard == nullptr ? nullptr : guard->get("classifier");
  if (node == nullptr) return absl::OkStatus();
  if (node->as_table() == nullptr) {
    return absl::InvalidArgumentError(StrCat(source, ": [guard] classifier must be a table"));
  }
  TomlSection table(node->as_table(), "guard.classifier", source);
  PILLAR_RETURN_IF_ERROR(table.ReadString("model", out.model));
  PILLAR_RETURN_IF_ERROR(table.ReadStrings("block", out.block));
  PILLAR_RETURN_IF_ERROR(table.ReadInt("max_tokens", out.max_tokens, 1, 4096));
  PILLAR_RETURN_IF_ERROR(table.ReadInt("severity_threshold", out.severity_threshold, 1, 7));
  table.Allow("thresholds");
  if (const toml::node* thresholds = node->as_table()->get("thresholds")) {
    if (thresholds->as_table() == nullptr) {
      return absl::InvalidArgumentError(
          StrCat(source, ": [guard.classifier] thresholds must be a table: { Violence = 4 }"));
    }
    for (const auto& [category, value] : *thresholds->as_table()) {
      const std::optional<int64_t> level = value.value<int64_t>();
      if (!level || *level < 1 || *level > 7) {
        return absl::InvalidArgumentError(StrCat(source, ": [guard.classifier] thresholds.",
                                                 category.str(),
                                                 " must be a severity from 1 to 7"));
      }
      out.thresholds[std::string(category.str())] = int(*level);
    }
  }
  std::vector<std::string> judge;
  PILLAR_RETURN_IF_ERROR(table.ReadStrings("judge", judge));
  if (table.Contains("judge")) {
    out.judge_prompts = out.judge_answers = false;
    for (const std::string& what : judge) {
      if (what != "prompts" && what != "answers") {
        return absl::InvalidArgumentError(
            StrCat(source, ": [guard.classifier] judge holds \"prompts\" and \"answers\", not \"",
                   what, "\""));
      }
      (what == "prompts" ? out.judge_prompts : out.judge_answers) = true;
    }
  }
  std::string on_error = out.allow_on_error ? "allow" : "block";
  PILLAR_RETURN_IF_ERROR(table.ReadString("on_error", on_error));
  if (on_error != "allow" && on_error != "block") {
    return absl::InvalidArgumentError(
        StrCat(source, ": [guard.classifier] on_error must be \"block\" or \"allow\""));
  }
  out.allow_on_error = on_error == "allow";
  return table.CheckNoUnknownKeys();
}

// [guard.models] or [guard.tenants]: a table of tables, each parsed over `parent`.
[[nodiscard]] absl::Status ReadOverrides(
    const toml::table* guard, std::string_view key, std::string_view source,
    const std::string& base, const GuardConfig& parent,
    std::map<std::string, std::shared_ptr<const GuardConfig>, std::less<>>& out) {
  const toml::node* node = guard == nullptr ? nullptr : guard->get(key);
  if (node == nullptr) return absl::OkStatus();
  if (node->as_table() == nullptr) {
    return absl::InvalidArgumentError(StrCat(source, ": [guard] ", key, " must be a table"));
  }
  for (const auto& [name, value] : *node->as_table()) {
    if (value.as_table() == nullptr || value.as_table()->contains("models") ||
        value.as_table()->contains("tenants")) {
      return absl::InvalidArgumentError(
          StrCat(source, ": [guard.", key, ".", name.str(), "] must be a table of guard settings"));
    }
    PILLAR_ASSIGN_OR_RETURN(GuardConfig one,
                            ParseGuardConfig(value.as_table(), source, base, &parent));
    out[std::string(name.str())] = std::make_shared<const GuardConfig>(std::move(one));
  }
  return absl::OkStatus();
}

}  // namespace

[[nodiscard]] absl::StatusOr<GuardConfig> ParseGuardConfig(const toml::table* guard,
                                                           std::string_view source,
                                                           const std::string& base,
                                                           const GuardConfig* inherited) {
  GuardConfig config;
  if (inherited != nullptr) {
    config.rules = inherited->rules;
    config.hash_key = inherited->hash_key;
    config.prompts = inherited->prompts;
    config.answers = inherited->answers;
    config.hold_back_bytes = inherited->hold_back_bytes;
    config.strip_answer_controls = inherited->strip_answer_controls;
    config.deny = inherited->deny;
    config.injection = inherited->injection;
    config.classifier = inherited->classifier;
  }
  TomlSection section(guard, "guard", source);
  PILLAR_RETURN_IF_ERROR(section.ReadBool("prompts", config.prompts));
  PILLAR_RETURN_IF_ERROR(section.ReadBool("answers", config.answers));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("hold_back_bytes", config.hold_back_bytes, 0, 1 << 16));
  std::string answer_controls = config.strip_answer_controls ? "strip" : "keep";
  PILLAR_RETURN_IF_ERROR(section.ReadString("answer_controls", answer_controls));
  if (answer_controls != "strip" && answer_controls != "keep") {
    return absl::InvalidArgumentError(StrCat(source, ": [guard] answer_controls is \"strip\" or ",
                                             "\"keep\", not \"", answer_controls, "\""));
  }
  config.strip_answer_controls = answer_controls == "strip";
  // The table's own keys are every type's defaults; [guard.entities.TYPE] overrides them.
  EntityRule defaults;
  const bool action_set = section.Contains("action");
  const bool redaction_set = section.Contains("redaction");
  const bool score_set = section.Contains("min_score");
  PILLAR_RETURN_IF_ERROR(ReadRule(section, defaults));
  for (EntityType type : kAllEntityTypes) {
    EntityRule& rule = config.rule(type);
    if (action_set) rule.action = defaults.action;
    if (redaction_set) rule.redaction = defaults.redaction;
    if (score_set) rule.min_score = defaults.min_score;
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
  PILLAR_RETURN_IF_ERROR(ReadEntities(guard, source, config));
  section.Allow("deny");
  PILLAR_RETURN_IF_ERROR(ReadDeny(guard, source, config));
  section.Allow("injection");
  PILLAR_RETURN_IF_ERROR(ReadInjection(guard, source, config.injection));
  section.Allow("classifier");
  PILLAR_RETURN_IF_ERROR(ReadClassifier(guard, source, config.classifier));
  if (inherited == nullptr) {  // after this table's own rules, which the overrides start from
    section.Allow("models");
    section.Allow("tenants");
    PILLAR_RETURN_IF_ERROR(ReadOverrides(guard, "models", source, base, config, config.models));
    PILLAR_RETURN_IF_ERROR(ReadOverrides(guard, "tenants", source, base, config, config.tenants));
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
