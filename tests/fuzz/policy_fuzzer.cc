// Fuzzes the policy parser and, for every policy it accepts, evaluation and explanation: a
// policy file is operator input that a reload applies to a running server.
#include <cstdint>
#include <string_view>

#include "policy/policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto policy = pillar::policy::Policy::Parse(
      std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.toml");
  if (!policy.ok()) return 0;
  pillar::identity::Principal p;
  p.id = "key:f";
  p.tenant = "a";
  p.roles = {"user", "admin", "*"};
  p.attributes["clearances"] = {"public", "secret"};
  pillar::identity::Attributes model = {{"tenant", {"a"}}, {"classification", {"public"}}};
  for (std::string_view action : pillar::policy::kActions) {
    for (auto plane : {pillar::policy::Plane::kData, pillar::policy::Plane::kAdmin}) {
      auto d = (*policy)->Evaluate(p, plane, action, {"model:digits/1", &model});
      // An allow always names the rule that granted it.
      if (d.allowed && d.rule == nullptr) __builtin_trap();
      (void)d.Explain("fuzz.toml", p, plane, action, "model:digits/1");
    }
  }
  return 0;
}
