// Authorization policy: who may do what to which resource (R-SEC-5), and the limits that apply
// (R-SEC-8). Roles grant actions on resources named by patterns; attribute conditions (ABAC)
// narrow a grant; deny rules override grants; anything not granted is denied. The language is
// documented in docs/security.md.
//
//   absl::StatusOr<std::shared_ptr<const Policy>> policy = Policy::Parse(text, "policy.toml");
//   Decision d = (*policy)->Evaluate(principal, Plane::kData, "infer",
//                                   {"model:digits/1", &model_attributes});
//   if (!d.allowed) LOG(d.Explain());
// A Policy is immutable once parsed; evaluate it from any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "identity/principal.h"

namespace pillar::policy {

enum class Plane : uint8_t { kData, kAdmin };
std::string_view PlaneName(Plane plane);

// The actions pillar's routes ask for. Policy files may name only these (or "*").
inline constexpr std::string_view kActions[] = {
    "infer", "read_metadata", "manage_models", "manage_keys", "read_audit", "read_metrics",
};

// One side of a condition: an attribute of the principal or the resource, or a literal.
struct Operand {
  enum class Kind : uint8_t { kPrincipal, kResource, kLiteral };
  // Fields of the principal that are not attributes; anything else is looked up by name.
  enum class Field : uint8_t { kAttribute, kId, kTenant, kRoles };
  Kind kind = Kind::kLiteral;
  Field field = Field::kAttribute;
  std::string attribute;             // for kPrincipal and kResource
  std::vector<std::string> literal;  // for kLiteral: one string, or a list
};

struct Condition {
  enum class Op : uint8_t { kEqual, kNotEqual, kIn, kNotIn };
  Operand left;
  Op op = Op::kEqual;
  Operand right;
  std::string text;  // as written, for explanations
};

struct Rule {
  enum class Effect : uint8_t { kAllow, kDeny };
  std::string name;
  int line = 0;  // where the rule starts in its file
  Effect effect = Effect::kAllow;
  std::vector<Plane> planes;
  std::vector<std::string> roles;      // "*": any authenticated principal
  std::vector<std::string> actions;    // "*": every action
  std::vector<std::string> resources;  // glob patterns
  std::vector<Condition> conditions;   // all must hold
  // Decision::Explain's text for a decision by this rule ("allowed by rule 'x' (file:12)"),
  // written once with the policy: every allowed request's audit record carries it.
  std::string allowed_by, denied_by;
};

// A limit on requests (R-SEC-8). Counted per key, per tenant or per model; applied to the
// requests whose action and resource match.
struct LimitRule {
  enum class Per : uint8_t { kKey, kTenant, kModel };
  enum class Kind : uint8_t { kRate, kConcurrency, kQuota };
  // kTokens: a language model's tokens (prompt and completion), for rate and quota limits.
  enum class Unit : uint8_t { kRequests, kElements, kTokens };
  enum class Period : uint8_t { kDay, kMonth };

  std::string name;
  int line = 0;
  uint32_t index = 0;  // position among the policy's limits
  Per per = Per::kKey;
  Kind kind = Kind::kRate;
  Unit unit = Unit::kRequests;
  std::vector<std::string> actions = {"infer"};
  std::vector<std::string> resources = {"model:*"};
  std::vector<std::string> tenants;  // empty: every tenant
  double rate = 0;                   // kRate: units per second
  int64_t burst = 1;                 // kRate: units that may arrive at once
  int64_t max_concurrent = 0;        // kConcurrency
  int64_t quota = 0;                 // kQuota: units per period
  Period period = Period::kDay;      // kQuota, calendar periods in UTC
};

std::string_view LimitPerName(LimitRule::Per per);

// The resource a request addresses and its attributes. For a model version these come from
// its model.toml [access] table plus "name" and "version".
struct Resource {
  std::string_view name;  // "model:digits/1", "server", "metrics" ...
  const identity::Attributes* attributes = nullptr;
};

struct Decision {
  bool allowed = false;
  const Rule* rule = nullptr;  // the rule that decided; null when nothing matched (default deny)
  // For a default deny: the first rule that matched everything but a condition, and that
  // condition, so the explanation can say what was missing.
  const Rule* near_rule = nullptr;
  const Condition* failed_condition = nullptr;

  // "allowed by rule 'x' (policy.toml:12)", "denied by rule ...", "no rule grants ...".
  std::string Explain(std::string_view source, const identity::Principal& principal, Plane plane,
                      std::string_view action, std::string_view resource) const;
};

// A deny rule that a request escapes by lacking an attribute one of its conditions reads: a
// missing attribute makes every comparison false, so the rule does not match such a request
// (on purpose: no rule decides on absent data). `pillar policy validate` prints these.
struct AbsentAttributeWarning {
  const Rule* rule = nullptr;
  // Each attribute that may be missing, as "principal.<name>" or "resource.<name>" (which
  // "model.<name>" is too), once, in the order the conditions read them.
  std::vector<std::string> attributes;
  std::vector<const Condition*> conditions;  // the rule's conditions that read them

  // "policy.toml:30: warning: deny rule 'x' does not deny a request without ... ".
  std::string Explain(std::string_view source) const;
};

class Policy {
 public:
  // InvalidArgument naming `source`, the line and what is wrong.
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<const Policy>> Parse(std::string_view text,
                                                                           std::string_view source);
  // The policy used when no file is configured: "admin" may do everything on both planes;
  // "user" may infer and read metadata on the data plane for its own tenant's models.
  static std::shared_ptr<const Policy> BuiltIn();
  static std::string_view BuiltInText();

  Decision Evaluate(const identity::Principal& principal, Plane plane, std::string_view action,
                    const Resource& resource) const;
  bool Allowed(const identity::Principal& principal, Plane plane, std::string_view action,
               const Resource& resource) const {
    return Evaluate(principal, plane, action, resource).allowed;
  }

  const std::string& source() const { return source_; }
  const std::vector<Rule>& rules() const { return rules_; }
  const std::vector<LimitRule>& limits() const { return limits_; }

 private:
  friend class PolicyParser;
  Policy() = default;
  void BuildIndex();
  // Rules for (plane, action, role), in file order; "*" roles and actions are folded in.
  const std::vector<const Rule*>* Candidates(Plane plane, uint32_t action, uint32_t role,
                                             Rule::Effect effect) const;

  std::string source_;
  std::vector<Rule> rules_;
  std::vector<LimitRule> limits_;
  absl::flat_hash_map<std::string, uint32_t> action_ids_;
  absl::flat_hash_map<std::string, uint32_t> role_ids_;  // every role some rule names
  absl::flat_hash_map<uint64_t, std::vector<const Rule*>> index_;
};

// The deny rules of `policy` that a request lacking an attribute is not denied by, in file
// order. An attribute counts as possibly missing unless every request the rule matches has it:
// principal.id always; principal.roles when the rule names roles (not "*"); a model's name and
// version when all the rule's resource patterns start with "model:".
std::vector<AbsentAttributeWarning> FindDenyRulesSkippedOnMissingAttributes(const Policy& policy);

// Warnings ("policy.toml:12: warning: limit 'x' ..."), in file order, for the resource patterns of
// rules and limits that name a model but can match none: model resources are
// "model:NAME/VERSION", so "model:digits" (no version, no wildcard) grants, denies or limits
// nothing (review helper-125: such a limit was accepted without a word and limited nothing).
std::vector<std::string> FindModelPatternsThatMatchNothing(const Policy& policy);

// Every warning above, as text ("policy.toml:12: warning: ..."): what `pillar policy validate`
// prints and the server says when it loads the file.
std::vector<std::string> PolicyWarnings(const Policy& policy);

}  // namespace pillar::policy
