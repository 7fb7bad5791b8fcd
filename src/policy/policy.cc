#include "policy/policy.h"

#include <algorithm>
#include <span>

#include "absl/container/inlined_vector.h"
#include "common/strings.h"
#include "policy/glob.h"

namespace pillar::policy {
namespace {

using identity::Principal;
using Values = std::span<const std::string>;

// Index keys pack (effect, plane, action, role) into 64 bits.
uint64_t IndexKey(Rule::Effect effect, Plane plane, uint32_t action, uint32_t role) {
  return (uint64_t(effect) << 62) | (uint64_t(plane) << 60) | (uint64_t(action) << 30) | role;
}

constexpr std::string_view kAnyRole = "*";

Values Resolve(const Operand& operand, const Principal& principal, const Resource& resource) {
  const identity::Attributes* attributes = nullptr;
  switch (operand.kind) {
    case Operand::Kind::kLiteral:
      return operand.literal;
    case Operand::Kind::kPrincipal:
      switch (operand.field) {
        case Operand::Field::kId:
          return Values(&principal.id, 1);
        case Operand::Field::kTenant:
          return principal.tenant.empty() ? Values() : Values(&principal.tenant, 1);
        case Operand::Field::kRoles:
          return principal.roles;
        case Operand::Field::kAttribute:
          attributes = &principal.attributes;
          break;
      }
      break;
    case Operand::Kind::kResource:
      attributes = resource.attributes;
      break;
  }
  if (attributes == nullptr) return {};
  auto it = attributes->find(operand.attribute);
  return it == attributes->end() ? Values() : Values(it->second);
}

bool Contains(Values set, const std::string& value) {
  return std::find(set.begin(), set.end(), value) != set.end();
}

bool IsSubset(Values a, Values b) {
  return std::all_of(a.begin(), a.end(), [&](const std::string& v) { return Contains(b, v); });
}

// A missing attribute makes every comparison false, so a rule never grants on absent data.
bool Holds(const Condition& c, const Principal& principal, const Resource& resource) {
  Values left = Resolve(c.left, principal, resource);
  Values right = Resolve(c.right, principal, resource);
  if (left.empty() || right.empty()) return false;
  switch (c.op) {
    case Condition::Op::kEqual:
      return left.size() == right.size() && IsSubset(left, right) && IsSubset(right, left);
    case Condition::Op::kNotEqual:
      return !(left.size() == right.size() && IsSubset(left, right) && IsSubset(right, left));
    case Condition::Op::kIn:
      return IsSubset(left, right);
    case Condition::Op::kNotIn:
      return std::none_of(left.begin(), left.end(),
                          [&](const std::string& v) { return Contains(right, v); });
  }
  return false;
}

bool MatchesAny(const std::vector<std::string>& patterns, std::string_view text) {
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::string& p) { return GlobMatch(p, text); });
}

std::string Location(std::string_view source, const Rule& rule) {
  return StrCat("rule '", rule.name, "' (", source, ":", rule.line, ")");
}

// True when some request that `rule` matches may lack `operand`'s value (Resolve() would give
// no values).
bool MayBeMissing(const Operand& operand, const Rule& rule) {
  switch (operand.kind) {
    case Operand::Kind::kLiteral:
      return false;
    case Operand::Kind::kPrincipal:
      switch (operand.field) {
        case Operand::Field::kId:
          return false;  // every principal has one
        case Operand::Field::kRoles:
          // A rule for named roles matches only principals that hold one of them.
          return Contains(rule.roles, std::string(kAnyRole));
        case Operand::Field::kTenant:
        case Operand::Field::kAttribute:
          return true;
      }
      return true;
    case Operand::Kind::kResource: {
      // The server sets name and version on every model version it decides on; other
      // resources (server, models, metrics) carry no attributes at all.
      const bool models_only =
          std::all_of(rule.resources.begin(), rule.resources.end(),
                      [](const std::string& p) { return p.starts_with("model:"); });
      return !(models_only && (operand.attribute == "name" || operand.attribute == "version"));
    }
  }
  return true;
}

std::string Spelled(const Operand& operand) {
  return StrCat(operand.kind == Operand::Kind::kPrincipal ? "principal." : "resource.",
                operand.attribute);
}

}  // namespace

std::string_view PlaneName(Plane plane) { return plane == Plane::kData ? "data" : "admin"; }

std::string_view LimitPerName(LimitRule::Per per) {
  switch (per) {
    case LimitRule::Per::kKey:
      return "key";
    case LimitRule::Per::kTenant:
      return "tenant";
    case LimitRule::Per::kModel:
      return "model";
  }
  return "?";
}

void Policy::BuildIndex() {
  for (Rule& rule : rules_) {
    rule.allowed_by = StrCat("allowed by ", Location(source_, rule));
    rule.denied_by = StrCat("denied by ", Location(source_, rule));
  }
  for (std::string_view action : kActions) {
    action_ids_.emplace(ToAbsl(action), uint32_t(action_ids_.size()));
  }
  role_ids_.emplace(ToAbsl(kAnyRole), 0);
  for (const Rule& rule : rules_) {
    for (const std::string& role : rule.roles) role_ids_.emplace(role, uint32_t(role_ids_.size()));
  }
  for (const Rule& rule : rules_) {
    for (Plane plane : rule.planes) {
      for (const auto& [action, action_id] : action_ids_) {
        if (!Contains(rule.actions, std::string(action)) && !Contains(rule.actions, "*")) continue;
        for (const std::string& role : rule.roles) {
          index_[IndexKey(rule.effect, plane, action_id, role_ids_.at(role))].push_back(&rule);
        }
      }
    }
  }
}

const std::vector<const Rule*>* Policy::Candidates(Plane plane, uint32_t action, uint32_t role,
                                                   Rule::Effect effect) const {
  auto it = index_.find(IndexKey(effect, plane, action, role));
  return it == index_.end() ? nullptr : &it->second;
}

Decision Policy::Evaluate(const Principal& principal, Plane plane, std::string_view action,
                          const Resource& resource) const {
  Decision decision;
  auto action_it = action_ids_.find(ToAbsl(action));
  if (action_it == action_ids_.end()) return decision;
  // The role ids to look at: the principal's roles that some rule names, then "*".
  absl::InlinedVector<uint32_t, 8> roles;
  for (const std::string& role : principal.roles) {
    auto it = role_ids_.find(role);
    if (it != role_ids_.end()) roles.push_back(it->second);
  }
  roles.push_back(role_ids_.at(ToAbsl(kAnyRole)));

  auto scan = [&](Rule::Effect effect) -> const Rule* {
    for (uint32_t role : roles) {
      const std::vector<const Rule*>* candidates =
          Candidates(plane, action_it->second, role, effect);
      if (candidates == nullptr) continue;
      for (const Rule* rule : *candidates) {
        if (!MatchesAny(rule->resources, resource.name)) continue;
        auto failed =
            std::find_if(rule->conditions.begin(), rule->conditions.end(),
                         [&](const Condition& c) { return !Holds(c, principal, resource); });
        if (failed == rule->conditions.end()) return rule;
        if (effect == Rule::Effect::kAllow && decision.near_rule == nullptr) {
          decision.near_rule = rule;
          decision.failed_condition = &*failed;
        }
      }
    }
    return nullptr;
  };
  if (const Rule* deny = scan(Rule::Effect::kDeny)) {
    decision.rule = deny;
    return decision;
  }
  if (const Rule* allow = scan(Rule::Effect::kAllow)) {
    decision.allowed = true;
    decision.rule = allow;
    decision.near_rule = nullptr;
    decision.failed_condition = nullptr;
  }
  return decision;
}

std::vector<AbsentAttributeWarning> FindDenyRulesSkippedOnMissingAttributes(const Policy& policy) {
  std::vector<AbsentAttributeWarning> warnings;
  for (const Rule& rule : policy.rules()) {
    if (rule.effect != Rule::Effect::kDeny) continue;
    AbsentAttributeWarning warning;
    warning.rule = &rule;
    for (const Condition& c : rule.conditions) {
      bool reads_missing = false;
      for (const Operand* operand : {&c.left, &c.right}) {
        if (!MayBeMissing(*operand, rule)) continue;
        reads_missing = true;
        std::string name = Spelled(*operand);
        if (!Contains(warning.attributes, name)) warning.attributes.push_back(std::move(name));
      }
      if (reads_missing) warning.conditions.push_back(&c);
    }
    if (!warning.attributes.empty()) warnings.push_back(std::move(warning));
  }
  return warnings;
}

std::vector<std::string> FindModelPatternsThatMatchNothing(const Policy& policy) {
  // On the data plane a request's resource names its version by number, an alias resolved to it
  // first ("model:digits/prod" is the alias itself, which only admin actions such as promote
  // address): a pattern naming an alias matches nothing there (review helper-127).
  auto matches_nothing = [](std::string_view pattern, bool data_plane_only) {
    if (!pattern.starts_with("model:") || pattern.find('*') != std::string_view::npos) {
      return false;
    }
    const size_t slash = pattern.find('/');
    if (slash == std::string_view::npos || slash + 1 == pattern.size()) return true;
    const std::string_view version = pattern.substr(slash + 1);
    return data_plane_only && !std::all_of(version.begin(), version.end(),
                                           [](char c) { return c >= '0' && c <= '9'; });
  };
  std::vector<std::pair<int, std::string>> found;  // by line
  auto check = [&](std::string_view what, const std::string& name, int line,
                   const std::vector<std::string>& resources, bool data_plane_only) {
    for (const std::string& pattern : resources) {
      if (!matches_nothing(pattern, data_plane_only)) continue;
      const size_t slash = pattern.find('/');  // after "model:", 6 bytes
      const std::string_view model = std::string_view(pattern).substr(
          6, slash == std::string::npos ? std::string_view::npos : slash - 6);
      found.emplace_back(
          line, StrCat(policy.source(), ":", line, ": warning: ", what, " '", name,
                       "' has the resource pattern '", pattern,
                       "', which matches no model: a model's resource is model:NAME/VERSION, ",
                       "the version a number (an alias is resolved to it first; every version: ",
                       "'model:", model, "/*')"));
    }
  };
  for (const Rule& rule : policy.rules()) {
    const bool data_only =
        std::find(rule.planes.begin(), rule.planes.end(), Plane::kAdmin) == rule.planes.end();
    check("rule", rule.name, rule.line, rule.resources, data_only);
  }
  for (const LimitRule& limit : policy.limits()) {  // limits count data-plane requests
    check("limit", limit.name, limit.line, limit.resources, true);
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> warnings;
  for (auto& [line, text] : found) warnings.push_back(std::move(text));
  return warnings;
}

std::vector<std::string> PolicyWarnings(const Policy& policy) {
  std::vector<std::string> warnings;
  for (const AbsentAttributeWarning& w : FindDenyRulesSkippedOnMissingAttributes(policy)) {
    warnings.push_back(w.Explain(policy.source()));
  }
  for (std::string& w : FindModelPatternsThatMatchNothing(policy)) warnings.push_back(std::move(w));
  return warnings;
}

std::string AbsentAttributeWarning::Explain(std::string_view source) const {
  std::string attributes_text;
  for (size_t i = 0; i < attributes.size(); ++i) {
    if (i > 0) attributes_text += i + 1 == attributes.size() ? " or " : ", ";
    attributes_text += attributes[i];
  }
  std::string conditions_text;
  for (const Condition* c : conditions) {
    StrAppend(&conditions_text, conditions_text.empty() ? "" : ", ", "`", c->text, "`");
  }
  return StrCat(source, ":", rule->line, ": warning: deny rule '", rule->name,
                "' does not deny a request without ", attributes_text, " (read by ",
                conditions_text,
                "): a missing attribute makes a condition false, so such a request is not "
                "denied by this rule. To refuse it as well, grant with allow rules whose "
                "conditions require the attribute instead: what no rule grants is denied.");
}

std::string Decision::Explain(std::string_view source, const Principal& principal, Plane plane,
                              std::string_view action, std::string_view resource) const {
  if (rule != nullptr) {
    return allowed ? rule->allowed_by : rule->denied_by;  // with the policy's own source
  }
  if (near_rule != nullptr) {
    return StrCat("denied: ", Location(source, *near_rule), " grants ", action, " on ", resource,
                  ", but its condition `", failed_condition->text, "` does not hold for ",
                  principal.id);
  }
  std::string roles;
  for (const std::string& role : principal.roles)
    StrAppend(&roles, roles.empty() ? "" : ", ", role);
  return StrCat("denied: no rule grants ", action, " on ", resource, " on the ", PlaneName(plane),
                " plane to ", principal.id, " (roles: ", roles.empty() ? "none" : roles, ")");
}

}  // namespace pillar::policy
