#include "policy/policy.h"

#include <gtest/gtest.h>

#include "policy/glob.h"

namespace pillar::policy {
namespace {

using identity::Attributes;
using identity::Principal;

constexpr const char* kPolicy = R"toml(version = 1

[[rule]]
name = "ops"
roles = ["admin"]
plane = "any"
actions = ["*"]
resources = ["*"]

[[rule]]
name = "tenant users"
roles = ["user"]
actions = ["infer", "read_metadata"]
resources = ["model:*"]
when = ["principal.tenant == model.tenant", "model.classification in principal.clearances"]

[[rule]]
name = "no infer on frozen models"
effect = "deny"
roles = ["*"]
actions = ["infer"]
resources = ["model:frozen/*"]

[[rule]]
name = "auditors"
roles = ["auditor"]
plane = "admin"
actions = ["read_audit", "read_metrics"]
resources = ["audit", "metrics"]

[[limit]]
name = "per-key"
per = "key"
rate = 10
burst = 5
)toml";

Principal User(std::string tenant, std::vector<std::string> clearances) {
  Principal p;
  p.id = "key:u";
  p.tenant = std::move(tenant);
  p.roles = {"user"};
  p.attributes["clearances"] = std::move(clearances);
  return p;
}

TEST(GlobTest, StarsMatchAnyRun) {
  EXPECT_TRUE(GlobMatch("model:digits/*", "model:digits/3"));
  EXPECT_TRUE(GlobMatch("*", "anything"));
  EXPECT_TRUE(GlobMatch("model:*/1", "model:a/b/1"));
  EXPECT_FALSE(GlobMatch("model:digits/*", "model:digits-lite/3"));
  EXPECT_FALSE(GlobMatch("server", "servers"));
  EXPECT_TRUE(GlobMatch("a*b*c", "aXbYbZc"));
  // No exponential backtracking on adversarial patterns.
  EXPECT_FALSE(GlobMatch(std::string(50, '*') + "b", std::string(10000, 'a')));
}

TEST(PolicyTest, RolesGrantActionsOnPatternsUnderConditions) {
  auto policy = Policy::Parse(kPolicy, "p.toml");
  ASSERT_TRUE(policy.ok()) << policy.status();
  const Policy& p = **policy;
  Attributes acme_internal = {{"tenant", {"acme"}}, {"classification", {"internal"}}};
  Attributes beta_public = {{"tenant", {"beta"}}, {"classification", {"public"}}};
  Principal alice = User("acme", {"public", "internal"});
  EXPECT_TRUE(p.Allowed(alice, Plane::kData, "infer", {"model:digits/1", &acme_internal}));
  EXPECT_FALSE(p.Allowed(alice, Plane::kData, "infer", {"model:digits/1", &beta_public}));
  // Same tenant, missing clearance.
  Principal carol = User("acme", {"public"});
  Decision d = p.Evaluate(carol, Plane::kData, "infer", {"model:digits/1", &acme_internal});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.Explain("p.toml", carol, Plane::kData, "infer", "model:digits/1"),
            "denied: rule 'tenant users' (p.toml:10) grants infer on model:digits/1, but its "
            "condition `model.classification in principal.clearances` does not hold for key:u");
  // Not on the admin plane: the rule's plane defaults to data.
  EXPECT_FALSE(
      p.Allowed(alice, Plane::kAdmin, "read_metadata", {"model:digits/1", &acme_internal}));
  // Actions the role lacks.
  EXPECT_FALSE(p.Allowed(alice, Plane::kData, "manage_keys", {"keys", nullptr}));
}

TEST(PolicyTest, DenyRulesOverrideGrantsAndEveryDecisionSaysWhy) {
  auto policy = Policy::Parse(kPolicy, "p.toml");
  ASSERT_TRUE(policy.ok());
  Principal admin;
  admin.id = "key:a";
  admin.roles = {"admin"};
  Decision d = (*policy)->Evaluate(admin, Plane::kData, "infer", {"model:frozen/2", nullptr});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.Explain("p.toml", admin, Plane::kData, "infer", "model:frozen/2"),
            "denied by rule 'no infer on frozen models' (p.toml:17)");
  d = (*policy)->Evaluate(admin, Plane::kAdmin, "manage_keys", {"keys", nullptr});
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.Explain("p.toml", admin, Plane::kAdmin, "manage_keys", "keys"),
            "allowed by rule 'ops' (p.toml:3)");
  Principal nobody;
  nobody.id = "jwt:x";
  d = (*policy)->Evaluate(nobody, Plane::kData, "infer", {"model:digits/1", nullptr});
  EXPECT_EQ(
      d.Explain("p.toml", nobody, Plane::kData, "infer", "model:digits/1"),
      "denied: no rule grants infer on model:digits/1 on the data plane to jwt:x (roles: none)");
}

TEST(PolicyTest, ConditionOperatorsAndMissingAttributesFailClosed) {
  auto policy = Policy::Parse(R"(version = 1
[[rule]]
name = "r"
roles = ["*"]
actions = ["read_metadata"]
resources = ["*"]
when = ["principal.tier != 'free'", "model.region not in ['cn', 'ru']", "'gold' in principal.tiers"]
)",
                              "c.toml");
  ASSERT_TRUE(policy.ok()) << policy.status();
  Principal p;
  p.id = "x";
  p.attributes = {{"tier", {"paid"}}, {"tiers", {"gold", "silver"}}};
  Attributes eu = {{"region", {"eu"}}};
  Attributes cn = {{"region", {"cn"}}};
  Attributes none;
  EXPECT_TRUE((*policy)->Allowed(p, Plane::kData, "read_metadata", {"m", &eu}));
  EXPECT_FALSE((*policy)->Allowed(p, Plane::kData, "read_metadata", {"m", &cn}));
  EXPECT_FALSE((*policy)->Allowed(p, Plane::kData, "read_metadata", {"m", &none}));
  p.attributes.erase("tier");
  EXPECT_FALSE((*policy)->Allowed(p, Plane::kData, "read_metadata", {"m", &eu}));
}

TEST(PolicyTest, ErrorsNameTheFileTheLineAndWhatIsWrong) {
  auto error = [](const std::string& text) {
    auto p = Policy::Parse(text, "bad.toml");
    EXPECT_FALSE(p.ok()) << text;
    return std::string(p.status().message());
  };
  const std::string head = "version = 1\n[[rule]]\nname = \"r\"\nroles = [\"u\"]\n";
  EXPECT_EQ(error("[[rule]]\nname = \"x\"\n"), "bad.toml: missing 'version = 1'");
  EXPECT_EQ(error("version = 2\n"), "bad.toml:1: version must be 1");
  EXPECT_EQ(error(head + "actions = [\"infr\"]\nresources = [\"*\"]\n"),
            "bad.toml:5: rule 'r': unknown action 'infr' (known: infer, read_metadata, "
            "manage_models, manage_keys, read_audit, read_metrics, *)");
  EXPECT_EQ(error(head + "actions = [\"infer\"]\n"), "bad.toml:2: rule 'r': missing 'resources'");
  EXPECT_EQ(error(head + "actions = [\"infer\"]\nresources = [\"*\"]\nwhen = [\"principal.tenant = "
                         "model.tenant\"]\n"),
            "bad.toml:7: rule 'r': condition `principal.tenant = model.tenant`: at column 18: "
            "expected ==, !=, in or not in");
  EXPECT_EQ(
      error(head + "actions = [\"infer\"]\nresources = [\"*\"]\nwhen = [\"user.x == 'a'\"]\n"),
      "bad.toml:7: rule 'r': condition `user.x == 'a'`: at column 1: unknown object 'user' "
      "(principal, model or resource)");
  EXPECT_EQ(error(head + "actions = [\"infer\"]\nresources = [\"*\"]\nplane = \"both\"\n"),
            "bad.toml:7: rule 'r': plane must be \"data\", \"admin\" or \"any\"");
  EXPECT_EQ(error(head + "actions = [\"infer\"]\nresources = [\"*\"]\nrole = \"x\"\n"),
            "bad.toml:7: rule 'r': unknown key 'role' (expected name, effect, plane, roles, "
            "actions, resources, when)");
  EXPECT_EQ(error("version = 1\n[[limit]]\nname = \"l\"\nper = \"key\"\nrate = 5\nquota = 3\n"),
            "bad.toml:2: limit 'l': set exactly one of rate, concurrency, quota");
  EXPECT_EQ(
      error("version = 1\n[[limit]]\nname = \"l\"\nper = \"key\"\nquota = 3\nperiod = \"week\"\n"),
      "bad.toml:6: limit 'l': period must be \"day\" or \"month\"");
  EXPECT_EQ(error("version = 1\n[[limit]]\nname = \"l\"\nper = \"user\"\nrate = 1\n"),
            "bad.toml:4: limit 'l': per must be \"key\", \"tenant\" or \"model\"");
  EXPECT_EQ(error("version = 1\n[[limit]]\nname = \"l\"\nper = \"key\"\nrate = 1\n"
                  "rate_per_minute = 60\n"),
            "bad.toml:6: limit 'l': set rate or rate_per_minute, not both");
  EXPECT_EQ(error("version = 1\n[[limit]]\nname = \"l\"\nper = \"key\"\nunit = \"words\"\n"
                  "rate = 1\n"),
            "bad.toml:5: limit 'l': unit must be \"requests\", \"elements\" or \"tokens\"");
  EXPECT_EQ(error("version = 1\n[[limit]]\nname = \"l\"\nper = \"key\"\nunit = \"tokens\"\n"
                  "concurrency = 1\n"),
            "bad.toml:5: limit 'l': a concurrency limit counts requests");
  EXPECT_EQ(error("version = 1\nrule = 3\n"),
            "bad.toml:2: 'rule' must be an array of tables: [[rule]]");
  EXPECT_NE(error("version = 1\n[[rule]\n").find("bad.toml:2"), std::string::npos);
}

TEST(PolicyTest, LimitsParseWithDefaults) {
  auto policy = Policy::Parse(kPolicy, "p.toml");
  ASSERT_TRUE(policy.ok());
  ASSERT_EQ((*policy)->limits().size(), 1u);
  const LimitRule& l = (*policy)->limits()[0];
  EXPECT_EQ(l.kind, LimitRule::Kind::kRate);
  EXPECT_EQ(l.rate, 10);
  EXPECT_EQ(l.burst, 5);
  EXPECT_EQ(l.actions, std::vector<std::string>{"infer"});
  EXPECT_EQ(l.resources, std::vector<std::string>{"model:*"});
}

TEST(PolicyTest, ATokensPerMinuteLimitHoldsAMinutesWorth) {
  auto policy = Policy::Parse(
      "version = 1\n[[limit]]\nname = \"tpm\"\nper = \"tenant\"\nunit = \"tokens\"\n"
      "rate_per_minute = 90000\n[[limit]]\nname = \"tpd\"\nper = \"key\"\nunit = \"tokens\"\n"
      "quota = 2000000\nperiod = \"day\"\n",
      "p.toml");
  ASSERT_TRUE(policy.ok()) << policy.status();
  const LimitRule& tpm = (*policy)->limits()[0];
  EXPECT_EQ(tpm.unit, LimitRule::Unit::kTokens);
  EXPECT_DOUBLE_EQ(tpm.rate, 1500);
  EXPECT_EQ(tpm.burst, 90000);
  EXPECT_EQ((*policy)->limits()[1].unit, LimitRule::Unit::kTokens);
}

TEST(PolicyTest, EveryRoleOfAPrincipalCountsHoweverManyItHas) {
  auto policy = Policy::Parse(kPolicy, "p.toml");
  ASSERT_TRUE(policy.ok());
  Principal many;
  many.id = "jwt:many";
  for (int i = 0; i < 40; ++i) many.roles.push_back("team-" + std::to_string(i));
  many.roles.push_back("admin");  // the 41st
  EXPECT_TRUE((*policy)->Allowed(many, Plane::kAdmin, "manage_keys", {"keys", nullptr}));
}

TEST(PolicyTest, TheBuiltInPolicyParsesAndIsDenyByDefault) {
  auto policy = Policy::BuiltIn();
  Principal user = User("demo", {});
  Attributes demo = {{"tenant", {"demo"}}};
  Attributes other = {{"tenant", {"other"}}};
  EXPECT_TRUE(policy->Allowed(user, Plane::kData, "infer", {"model:digits/1", &demo}));
  EXPECT_FALSE(policy->Allowed(user, Plane::kData, "infer", {"model:digits/1", &other}));
  EXPECT_FALSE(policy->Allowed(user, Plane::kAdmin, "read_metrics", {"metrics", nullptr}));
  Principal no_roles;
  no_roles.id = "k";
  no_roles.tenant = "demo";
  EXPECT_FALSE(policy->Allowed(no_roles, Plane::kData, "infer", {"model:digits/1", &demo}));
}

TEST(PolicyTest, DenyRulesThatAMissingAttributeEscapesAreFound) {
  auto policy = Policy::Parse(R"toml(version = 1

[[rule]]
name = "users"
roles = ["user"]
actions = ["infer"]
resources = ["model:*"]
when = ["principal.department != 'x'"]

[[rule]]
name = "no finance for others"
effect = "deny"
roles = ["user"]
actions = ["infer"]
resources = ["model:*"]
when = ["principal.department not in ['finance']", "model.owner == 'finance'"]

[[rule]]
name = "no frozen models"
effect = "deny"
roles = ["*"]
actions = ["infer"]
resources = ["model:frozen/*"]
when = ["model.name == 'frozen'", "principal.id != 'key:ops'", "principal.roles != ['ops']"]

[[rule]]
name = "no cross-tenant reads"
effect = "deny"
roles = ["user"]
actions = ["read_metadata"]
resources = ["model:*"]
when = ["principal.roles in ['user']", "model.version != '1'", "principal.tenant != model.tenant"]
)toml",
                              "lint.toml");
  ASSERT_TRUE(policy.ok()) << policy.status();
  std::vector<AbsentAttributeWarning> warnings = FindDenyRulesSkippedOnMissingAttributes(**policy);
  ASSERT_EQ(warnings.size(), 3u);
  // Allow rules never warn: a missing attribute only withholds a grant.
  EXPECT_EQ(warnings[0].rule->name, "no finance for others");
  EXPECT_EQ(warnings[0].attributes,
            (std::vector<std::string>{"principal.department", "resource.owner"}));
  EXPECT_EQ(warnings[0].conditions.size(), 2u);
  EXPECT_EQ(warnings[0].Explain("lint.toml"),
            "lint.toml:10: warning: deny rule 'no finance for others' does not deny a request "
            "without principal.department or resource.owner (read by `principal.department not "
            "in ['finance']`, `model.owner == 'finance'`): a missing attribute makes a condition "
            "false, so such a request is not denied by this rule. To refuse it as well, grant "
            "with allow rules whose conditions require the attribute instead: what no rule "
            "grants is denied.");
  // A model's name is always set, and so is the principal's id; but a rule for roles ["*"]
  // matches principals that have no roles at all.
  EXPECT_EQ(warnings[1].rule->name, "no frozen models");
  EXPECT_EQ(warnings[1].attributes, std::vector<std::string>{"principal.roles"});
  // Named roles are always there, a tenant need not be.
  EXPECT_EQ(warnings[2].rule->name, "no cross-tenant reads");
  EXPECT_EQ(warnings[2].attributes,
            (std::vector<std::string>{"principal.tenant", "resource.tenant"}));
  ASSERT_EQ(warnings[2].conditions.size(), 1u);
  EXPECT_EQ(warnings[2].conditions[0]->text, "principal.tenant != model.tenant");
  // What the warning is about: a principal without a department is not denied.
  Principal no_department = User("acme", {});
  Attributes finance = {{"owner", {"finance"}}, {"name", {"ledger"}}, {"version", {"1"}}};
  Decision d =
      (*policy)->Evaluate(no_department, Plane::kData, "infer", {"model:ledger/1", &finance});
  EXPECT_TRUE(d.rule == nullptr || d.rule->effect != Rule::Effect::kDeny);
}

TEST(PolicyTest, APolicyWithoutSuchDenyRulesHasNoWarnings) {
  auto policy = Policy::Parse(kPolicy, "policy.toml");
  ASSERT_TRUE(policy.ok());
  EXPECT_TRUE(FindDenyRulesSkippedOnMissingAttributes(**policy).empty());
  EXPECT_TRUE(FindDenyRulesSkippedOnMissingAttributes(*Policy::BuiltIn()).empty());
  // A model resource's name is not set on other resources: "*" patterns make it missable.
  auto wide = Policy::Parse(R"toml(version = 1
[[rule]]
name = "deny"
effect = "deny"
roles = ["user"]
actions = ["*"]
resources = ["*"]
when = ["model.name == 'x'"]
)toml",
                            "wide.toml");
  ASSERT_TRUE(wide.ok());
  EXPECT_EQ(FindDenyRulesSkippedOnMissingAttributes(**wide).size(), 1u);
}

// Found by review helper-125: a limit whose resource named a model without a version
// ("model:digits") was accepted without a word and limited nothing.
TEST(PolicyTest, AModelPatternThatCanMatchNoModelIsWarnedOf) {
  auto policy = Policy::Parse(R"toml(version = 1
[[rule]]
name = "users"
roles = ["user"]
actions = ["infer"]
resources = ["model:digits/*", "model:lite/", "model:digits/prod", "model:digits/3"]

[[rule]]
name = "promoters"
roles = ["operator"]
plane = "any"
actions = ["manage_models"]
resources = ["model:digits/prod"]

[[limit]]
name = "burst"
per = "key"
rate = 1
burst = 3
resources = ["model:digits", "model:*", "model:x*", "server"]
)toml",
                              "p.toml");
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(FindModelPatternsThatMatchNothing(**policy),
            (std::vector<std::string>{
                "p.toml:2: warning: rule 'users' has the resource pattern 'model:lite/', which "
                "matches no model: a model's resource is model:NAME/VERSION, the version a "
                "number (an alias is resolved to it first; every version: 'model:lite/*')",
                "p.toml:2: warning: rule 'users' has the resource pattern 'model:digits/prod', "
                "which matches no model: a model's resource is model:NAME/VERSION, the version a "
                "number (an alias is resolved to it first; every version: 'model:digits/*')",
                "p.toml:15: warning: limit 'burst' has the resource pattern 'model:digits', which "
                "matches no model: a model's resource is model:NAME/VERSION, the version a "
                "number (an alias is resolved to it first; every version: 'model:digits/*')"}));
  EXPECT_TRUE(FindModelPatternsThatMatchNothing(*Policy::BuiltIn()).empty());
  auto fine = Policy::Parse(kPolicy, "policy.toml");
  ASSERT_TRUE(fine.ok());
  EXPECT_TRUE(FindModelPatternsThatMatchNothing(**fine).empty());
}

}  // namespace
}  // namespace pillar::policy
