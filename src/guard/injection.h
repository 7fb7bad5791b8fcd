// Prompt-injection heuristics (docs/guard.md, "Prompt injection"): signs that a text a user or
// a tool wrote tries to override the instructions the model was given by its operator: asking
// it to ignore them or reveal them, a persona without rules, a chat template's control tokens
// or a fake system header inside a message. Each sign found adds its weight, and the score is
// 1 - prod(1 - weight) over the signs found, in [0, 1). English and Portuguese.
//
// These are heuristics: a determined attacker can phrase around them, and a user quoting an
// attack can trip them. They are for flagging (and, where an operator accepts the false
// positives, blocking) the common attacks cheaply; a classifier (the guard's classifier hook)
// is the stronger tool.
//
//   InjectionScore s = ScoreInjection(user_message);
//   if (s.score >= 0.6) ... s.signals: {"override_instructions", "template_tokens"}
#pragma once

#include <string_view>
#include <vector>

#include "guard/deny_list.h"

namespace pillar::guard {

struct InjectionConfig {
  bool enabled = true;
  double threshold = 0.6;  // a score at or above it is acted on
  DenyAction action = DenyAction::kFlag;
};

struct InjectionScore {
  double score = 0;
  std::vector<std::string_view> signals;  // static names, in the order of the signs' table
};

InjectionScore ScoreInjection(std::string_view text);

}  // namespace pillar::guard
