// Reads a policy file (docs/security.md): strict, and every error names the file, the line and
// what is wrong, so an operator can fix a refused reload without guessing.
#include <cctype>
#include <cmath>
#include <set>

#include "common/strings.h"
#include "common/toml_parse.h"
#include "policy/policy.h"

namespace pillar::policy {

class PolicyParser {
 public:
  explicit PolicyParser(std::string_view source) : source_(source) {}

  [[nodiscard]] absl::StatusOr<std::shared_ptr<const Policy>> Parse(std::string_view text) {
    absl::StatusOr<toml::table> table = ParseToml(text, source_);
    if (!table.ok()) return table.status();
    if (!table->contains("version")) {
      return absl::InvalidArgumentError(StrCat(source_, ": missing 'version = 1'"));
    }
    std::shared_ptr<Policy> policy(new Policy);
    policy->source_ = std::string(source_);
    for (const auto& [key, node] : *table) {
      const std::string name(key.str());
      if (name == "version") {
        if (!node.is_integer() || node.as_integer()->get() != 1) {
          return Error(node, "version must be 1");
        }
      } else if (name == "rule" || name == "limit") {
        const toml::array* array = node.as_array();
        if (array == nullptr || !array->is_array_of_tables()) {
          return Error(node, StrCat("'", name, "' must be an array of tables: [[", name, "]]"));
        }
        for (const toml::node& element : *array) {
          absl::Status s = name == "rule" ? ParseRule(*element.as_table(), *policy)
                                          : ParseLimit(*element.as_table(), *policy);
          if (!s.ok()) return s;
        }
      } else {
        return Error(node,
                     StrCat("unknown key '", name, "' (expected version, [[rule]], [[limit]])"));
      }
    }
    policy->BuildIndex();
    return std::shared_ptr<const Policy>(std::move(policy));
  }

 private:
  [[nodiscard]] absl::Status Error(const toml::node& node, std::string_view what) const {
    return absl::InvalidArgumentError(StrCat(source_, ":", node.source().begin.line, ": ", what));
  }

  // A string, or an array of strings; each must be non-empty and at most 256 bytes.
  [[nodiscard]] absl::Status ReadStrings(const toml::table& table, std::string_view key,
                                         std::string_view owner, std::vector<std::string>& out,
                                         bool required) {
    const toml::node* node = table.get(key);
    if (node == nullptr) {
      if (required) return Error(table, StrCat(owner, ": missing '", key, "'"));
      return absl::OkStatus();
    }
    out.clear();
    auto take = [&](const toml::node& n) -> absl::Status {
      if (!n.is_string() || n.as_string()->get().empty() || n.as_string()->get().size() > 256) {
        return Error(n, StrCat(owner, ": '", key, "' must hold non-empty strings"));
      }
      out.push_back(n.as_string()->get());
      return absl::OkStatus();
    };
    if (const toml::array* array = node->as_array()) {
      if (array->empty()) return Error(*node, StrCat(owner, ": '", key, "' must not be empty"));
      for (const toml::node& n : *array) {
        if (absl::Status s = take(n); !s.ok()) return s;
      }
      return absl::OkStatus();
    }
    return take(*node);
  }

  [[nodiscard]] absl::Status ReadString(const toml::table& table, std::string_view key,
                                        std::string_view owner, std::string& out, bool required) {
    const toml::node* node = table.get(key);
    if (node == nullptr) {
      return required ? Error(table, StrCat(owner, ": missing '", key, "'")) : absl::OkStatus();
    }
    if (!node->is_string() || node->as_string()->get().empty()) {
      return Error(*node, StrCat(owner, ": '", key, "' must be a non-empty string"));
    }
    out = node->as_string()->get();
    return absl::OkStatus();
  }

  [[nodiscard]] absl::Status CheckKeys(const toml::table& table, std::string_view owner,
                                       std::initializer_list<std::string_view> known) {
    for (const auto& [key, node] : table) {
      if (std::find(known.begin(), known.end(), key.str()) == known.end()) {
        std::string list;
        for (std::string_view k : known) StrAppend(&list, list.empty() ? "" : ", ", k);
        return Error(node, StrCat(owner, ": unknown key '", key.str(), "' (expected ", list, ")"));
      }
    }
    return absl::OkStatus();
  }

  [[nodiscard]] absl::Status CheckActions(const toml::table& table, std::string_view owner,
                                          const std::vector<std::string>& actions) {
    for (const std::string& action : actions) {
      if (action == "*") continue;
      if (std::find(std::begin(kActions), std::end(kActions), action) == std::end(kActions)) {
        std::string list;
        for (std::string_view a : kActions) StrAppend(&list, list.empty() ? "" : ", ", a);
        return Error(*table.get("actions"),
                     StrCat(owner, ": unknown action '", action, "' (known: ", list, ", *)"));
      }
    }
    return absl::OkStatus();
  }

  [[nodiscard]] absl::Status ParseRule(const toml::table& table, Policy& policy) {
    Rule rule;
    rule.line = int(table.source().begin.line);
    std::string owner = StrCat("rule #", policy.rules_.size() + 1);
    if (absl::Status s = ReadString(table, "name", owner, rule.name, true); !s.ok()) return s;
    owner = StrCat("rule '", rule.name, "'");
    if (!rule_names_.insert(rule.name).second) {
      return Error(table, StrCat(owner, ": another rule has this name"));
    }
    if (absl::Status s = CheckKeys(
            table, owner, {"name", "effect", "plane", "roles", "actions", "resources", "when"});
        !s.ok()) {
      return s;
    }
    std::string effect = "allow";
    if (absl::Status s = ReadString(table, "effect", owner, effect, false); !s.ok()) return s;
    if (effect == "allow") {
      rule.effect = Rule::Effect::kAllow;
    } else if (effect == "deny") {
      rule.effect = Rule::Effect::kDeny;
    } else {
      return Error(*table.get("effect"), StrCat(owner, ": effect must be \"allow\" or \"deny\""));
    }
    std::string plane = "data";
    if (absl::Status s = ReadString(table, "plane", owner, plane, false); !s.ok()) return s;
    if (plane == "data") {
      rule.planes = {Plane::kData};
    } else if (plane == "admin") {
      rule.planes = {Plane::kAdmin};
    } else if (plane == "any") {
      rule.planes = {Plane::kData, Plane::kAdmin};
    } else {
      return Error(*table.get("plane"),
                   StrCat(owner, ": plane must be \"data\", \"admin\" or \"any\""));
    }
    if (absl::Status s = ReadStrings(table, "roles", owner, rule.roles, true); !s.ok()) return s;
    if (absl::Status s = ReadStrings(table, "actions", owner, rule.actions, true); !s.ok())
      return s;
    if (absl::Status s = CheckActions(table, owner, rule.actions); !s.ok()) return s;
    if (absl::Status s = ReadStrings(table, "resources", owner, rule.resources, true); !s.ok())
      return s;
    std::vector<std::string> when;
    if (absl::Status s = ReadStrings(table, "when", owner, when, false); !s.ok()) return s;
    for (const std::string& text : when) {
      absl::StatusOr<Condition> condition = ParseCondition(text);
      if (!condition.ok()) {
        return Error(*table.get("when"),
                     StrCat(owner, ": condition `", text, "`: ", condition.status().message()));
      }
      rule.conditions.push_back(std::move(*condition));
    }
    policy.rules_.push_back(std::move(rule));
    return absl::OkStatus();
  }

  [[nodiscard]] absl::Status ParseLimit(const toml::table& table, Policy& policy) {
    LimitRule limit;
    limit.line = int(table.source().begin.line);
    limit.index = uint32_t(policy.limits_.size());
    std::string owner = StrCat("limit #", policy.limits_.size() + 1);
    if (absl::Status s = ReadString(table, "name", owner, limit.name, true); !s.ok()) return s;
    owner = StrCat("limit '", limit.name, "'");
    for (char c : limit.name) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
        return Error(table, StrCat(owner, ": names may hold letters, digits, '-', '_' and '.'"));
      }
    }
    if (!limit_names_.insert(limit.name).second) {
      return Error(table, StrCat(owner, ": another limit has this name"));
    }
    if (absl::Status s =
            CheckKeys(table, owner,
                      {"name", "per", "actions", "resources", "tenants", "unit", "rate",
                       "rate_per_minute", "burst", "concurrency", "quota", "period"});
        !s.ok()) {
      return s;
    }
    std::string per;
    if (absl::Status s = ReadString(table, "per", owner, per, true); !s.ok()) return s;
    if (per == "key") {
      limit.per = LimitRule::Per::kKey;
    } else if (per == "tenant") {
      limit.per = LimitRule::Per::kTenant;
    } else if (per == "model") {
      limit.per = LimitRule::Per::kModel;
    } else {
      return Error(*table.get("per"),
                   StrCat(owner, ": per must be \"key\", \"tenant\" or \"model\""));
    }
    if (absl::Status s = ReadStrings(table, "actions", owner, limit.actions, false); !s.ok())
      return s;
    if (absl::Status s = CheckActions(table, owner, limit.actions); !s.ok()) return s;
    if (absl::Status s = ReadStrings(table, "resources", owner, limit.resources, false); !s.ok())
      return s;
    if (absl::Status s = ReadStrings(table, "tenants", owner, limit.tenants, false); !s.ok())
      return s;

    const toml::node* rate = table.get("rate");
    const toml::node* per_minute = table.get("rate_per_minute");
    if (rate != nullptr && per_minute != nullptr) {
      return Error(*per_minute, StrCat(owner, ": set rate or rate_per_minute, not both"));
    }
    const double rate_scale = per_minute != nullptr ? 60.0 : 1.0;
    if (per_minute != nullptr) rate = per_minute;
    const toml::node* concurrency = table.get("concurrency");
    const toml::node* quota = table.get("quota");
    if ((rate != nullptr) + (concurrency != nullptr) + (quota != nullptr) != 1) {
      return Error(table, StrCat(owner, ": set exactly one of rate, concurrency, quota"));
    }
    std::string unit = "requests";
    if (absl::Status s = ReadString(table, "unit", owner, unit, false); !s.ok()) return s;
    if (unit == "requests") {
      limit.unit = LimitRule::Unit::kRequests;
    } else if (unit == "elements") {
      limit.unit = LimitRule::Unit::kElements;
    } else if (unit == "tokens") {
      limit.unit = LimitRule::Unit::kTokens;
    } else {
      return Error(*table.get("unit"),
                   StrCat(owner, ": unit must be \"requests\", \"elements\" or \"tokens\""));
    }
    auto positive_int = [&](const toml::node* node, std::string_view key, int64_t max,
                            int64_t& out) -> absl::Status {
      if (!node->is_integer() || node->as_integer()->get() < 1 || node->as_integer()->get() > max) {
        return Error(*node, StrCat(owner, ": ", key, " must be an integer in [1, ", max, "]"));
      }
      out = node->as_integer()->get();
      return absl::OkStatus();
    };
    constexpr int64_t kMaxAmount = int64_t(1) << 50;
    if (rate != nullptr) {
      limit.kind = LimitRule::Kind::kRate;
      std::optional<double> value = rate->value<double>();
      // The lower bound (one unit per ~11.6 days) keeps the bucket's arithmetic in range.
      if (!value || !std::isfinite(*value) || *value / rate_scale < 1e-6 ||
          *value / rate_scale > 1e12) {
        return Error(*rate, per_minute != nullptr
                                ? StrCat(owner,
                                         ": rate_per_minute must be a number of units per minute "
                                         "in [6e-5, 6e13]")
                                : StrCat(owner,
                                         ": rate must be a number of units per second in "
                                         "[1e-6, 1e12]"));
      }
      limit.rate = *value / rate_scale;
      // By default a second's worth may arrive at once, or a minute's for a rate per minute (as
      // a tokens-per-minute limit is meant: the minute's tokens, however they arrive in it).
      limit.burst = std::max<int64_t>(1, int64_t(std::ceil(*value)));
      if (const toml::node* burst = table.get("burst")) {
        if (absl::Status s = positive_int(burst, "burst", kMaxAmount, limit.burst); !s.ok())
          return s;
      }
    } else if (table.get("burst") != nullptr) {
      return Error(*table.get("burst"), StrCat(owner, ": burst goes with rate"));
    }
    if (concurrency != nullptr) {
      limit.kind = LimitRule::Kind::kConcurrency;
      if (table.get("unit") != nullptr) {
        return Error(*table.get("unit"), StrCat(owner, ": a concurrency limit counts requests"));
      }
      if (absl::Status s = positive_int(concurrency, "concurrency", 1 << 20, limit.max_concurrent);
          !s.ok()) {
        return s;
      }
    }
    if (quota != nullptr) {
      limit.kind = LimitRule::Kind::kQuota;
      if (absl::Status s = positive_int(quota, "quota", kMaxAmount, limit.quota); !s.ok()) return s;
      std::string period;
      if (absl::Status s = ReadString(table, "period", owner, period, true); !s.ok()) return s;
      if (period == "day") {
        limit.period = LimitRule::Period::kDay;
      } else if (period == "month") {
        limit.period = LimitRule::Period::kMonth;
      } else {
        return Error(*table.get("period"), StrCat(owner, ": period must be \"day\" or \"month\""));
      }
    } else if (table.get("period") != nullptr) {
      return Error(*table.get("period"), StrCat(owner, ": period goes with quota"));
    }
    policy.limits_.push_back(std::move(limit));
    return absl::OkStatus();
  }

  // condition := operand op operand
  // operand   := ("principal" | "model" | "resource") "." name | "'...'" | "\"...\"" | "[" str, ...
  // "]" op        := "==" | "!=" | "in" | "not in"
  [[nodiscard]] absl::StatusOr<Condition> ParseCondition(std::string_view text) {
    Condition c;
    c.text = std::string(text);
    size_t pos = 0;
    absl::StatusOr<Operand> left = ParseOperand(text, pos);
    if (!left.ok()) return left.status();
    SkipSpace(text, pos);
    std::string_view rest = text.substr(pos);
    if (rest.starts_with("==")) {
      c.op = Condition::Op::kEqual;
      pos += 2;
    } else if (rest.starts_with("!=")) {
      c.op = Condition::Op::kNotEqual;
      pos += 2;
    } else if (rest.starts_with("in ") || rest.starts_with("in[") || rest.starts_with("in\"") ||
               rest.starts_with("in'")) {
      c.op = Condition::Op::kIn;
      pos += 2;
    } else if (rest.starts_with("not ")) {
      pos += 4;
      SkipSpace(text, pos);
      if (!text.substr(pos).starts_with("in")) return Invalid(pos, "expected 'in' after 'not'");
      c.op = Condition::Op::kNotIn;
      pos += 2;
    } else {
      return Invalid(pos, "expected ==, !=, in or not in");
    }
    absl::StatusOr<Operand> right = ParseOperand(text, pos);
    if (!right.ok()) return right.status();
    SkipSpace(text, pos);
    if (pos != text.size()) return Invalid(pos, "unexpected text after the condition");
    if (left->kind == Operand::Kind::kLiteral && right->kind == Operand::Kind::kLiteral) {
      return absl::InvalidArgumentError("compares two literals; one side must be an attribute");
    }
    c.left = std::move(*left);
    c.right = std::move(*right);
    return c;
  }

  static void SkipSpace(std::string_view text, size_t& pos) {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t')) ++pos;
  }

  [[nodiscard]] static absl::Status Invalid(size_t pos, std::string_view what) {
    return absl::InvalidArgumentError(StrCat("at column ", pos + 1, ": ", what));
  }

  [[nodiscard]] static absl::StatusOr<std::string> ParseString(std::string_view text, size_t& pos) {
    const char quote = text[pos];
    size_t end = text.find(quote, pos + 1);
    if (end == std::string_view::npos) return Invalid(pos, "unterminated string");
    std::string value(text.substr(pos + 1, end - pos - 1));
    if (value.find('\\') != std::string::npos) return Invalid(pos, "strings take no escapes");
    pos = end + 1;
    return value;
  }

  [[nodiscard]] static absl::StatusOr<Operand> ParseOperand(std::string_view text, size_t& pos) {
    SkipSpace(text, pos);
    Operand operand;
    if (pos >= text.size()) return Invalid(pos, "expected an attribute or a literal");
    const char c = text[pos];
    if (c == '"' || c == '\'') {
      absl::StatusOr<std::string> value = ParseString(text, pos);
      if (!value.ok()) return value.status();
      operand.literal.push_back(std::move(*value));
      return operand;
    }
    if (c == '[') {
      ++pos;
      while (true) {
        SkipSpace(text, pos);
        if (pos >= text.size()) return Invalid(pos, "unterminated list");
        if (text[pos] == ']' && operand.literal.empty()) return Invalid(pos, "empty list");
        if (text[pos] != '"' && text[pos] != '\'') return Invalid(pos, "lists hold strings");
        absl::StatusOr<std::string> value = ParseString(text, pos);
        if (!value.ok()) return value.status();
        operand.literal.push_back(std::move(*value));
        SkipSpace(text, pos);
        if (pos < text.size() && text[pos] == ',') {
          ++pos;
          continue;
        }
        if (pos < text.size() && text[pos] == ']') {
          ++pos;
          return operand;
        }
        return Invalid(pos, "expected ',' or ']'");
      }
    }
    size_t start = pos;
    while (pos < text.size() && (std::isalnum(static_cast<unsigned char>(text[pos])) ||
                                 text[pos] == '_' || text[pos] == '.' || text[pos] == '-')) {
      ++pos;
    }
    std::string_view word = text.substr(start, pos - start);
    size_t dot = word.find('.');
    if (dot == std::string_view::npos || dot + 1 == word.size() ||
        word.find('.', dot + 1) != std::string_view::npos) {
      return Invalid(start,
                     "expected principal.<name>, model.<name>, resource.<name> or a literal");
    }
    std::string_view owner = word.substr(0, dot);
    operand.attribute = std::string(word.substr(dot + 1));
    if (owner == "principal") {
      operand.kind = Operand::Kind::kPrincipal;
      if (operand.attribute == "id") operand.field = Operand::Field::kId;
      if (operand.attribute == "tenant") operand.field = Operand::Field::kTenant;
      if (operand.attribute == "roles") operand.field = Operand::Field::kRoles;
    } else if (owner == "model" || owner == "resource") {
      operand.kind = Operand::Kind::kResource;
    } else {
      return Invalid(start, StrCat("unknown object '", owner, "' (principal, model or resource)"));
    }
    return operand;
  }

  std::string_view source_;
  std::set<std::string, std::less<>> rule_names_;
  std::set<std::string, std::less<>> limit_names_;
};

absl::StatusOr<std::shared_ptr<const Policy>> Policy::Parse(std::string_view text,
                                                            std::string_view source) {
  return PolicyParser(source).Parse(text);
}

std::string_view Policy::BuiltInText() {
  return R"toml(# pillar's built-in policy, used when [policy] file is not set.
version = 1

[[rule]]
name = "admins manage everything"
roles = ["admin"]
plane = "any"
actions = ["*"]
resources = ["*"]

[[rule]]
name = "users see the server"
roles = ["user"]
actions = ["read_metadata"]
resources = ["server"]

[[rule]]
name = "users use their tenant's models"
roles = ["user"]
actions = ["infer", "read_metadata"]
resources = ["model:*"]
when = ["principal.tenant == model.tenant"]
)toml";
}

std::shared_ptr<const Policy> Policy::BuiltIn() {
  static const std::shared_ptr<const Policy> policy = *Parse(BuiltInText(), "<built-in policy>");
  return policy;
}

}  // namespace pillar::policy
