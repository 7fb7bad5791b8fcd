#include "stages/escaped_content.h"

#include <algorithm>
#include <cstdint>

#include "common/strings.h"
#include "guard/display_controls.h"
#include "guard/json_escapes.h"
#include "stages/whole_answer.h"

namespace pillar::stages {

size_t EscapedContent::TailShowing(const guard::GuardConfig& config) {
  return std::max(kTail, 4 * size_t(std::max<int64_t>(config.hold_back_bytes, 0)));
}

// From all that is held when OpensJson first says so; then from what came since the last time
// and the 18 bytes before it, where an escape cut by a chunk's end began (11) with a "\u" that
// is no escape or a high surrogate before it (6: WithoutEscapedDisplayControls). The
// backslashes before that say whether its first byte is escaped (those the released text ends
// with too, when they reach back to its start). A raw run is held whole until a blank comes, so
// an escape is whole in what is held before it can go out.
void EscapedContent::TakeDisplayControls(std::string& held, size_t appended_at, bool finished,
                                         const guard::GuardConfig& config) {
  if (!json_) {
    json_ = OpensJson(held);
    if (!json_ && held.size() > kUndecidedJson) json_ = true;
    if (!json_) return;
    appended_at = 0;
  }
  if (!config.strip_answer_controls || !*json_) return;
  const size_t from = appended_at > 18 ? appended_at - 18 : 0;
  size_t run = guard::BackslashesBefore(held, from);
  if (run == from) run += guard::BackslashesBefore(sent_tail_, sent_tail_.size());
  std::string storage;
  const std::string_view region = std::string_view(held).substr(from);
  if (guard::WithoutEscapedDisplayControls(region, storage, run % 2 == 1, !finished).size() ==
      region.size()) {
    return;
  }
  held.resize(from);
  held.append(storage);
}

bool EscapedContent::Waits(const std::string& held) const {
  if (!guard::MayHaveJsonEscapes(sent_tail_)) return false;
  const size_t read = sent_tail_.size() + held.size();
  return held.size() < read / 16;
}

std::string EscapedContent::Finding(const std::string& held,
                                    const guard::GuardConfig& config) const {
  if (!guard::MayHaveJsonEscapes(held) && !guard::MayHaveJsonEscapes(sent_tail_)) {
    return std::string();
  }
  const std::string read = sent_tail_ + held;
  std::string decoded;
  if (std::string escaped = guard::EscapedFinding(read, config, &decoded); !escaped.empty()) {
    return StrCat(escaped, " spelled with JSON escapes");
  }
  // TakeDisplayControls took them out; one left (a rewrite walked around) still blocks, as in
  // a whole answer.
  if (config.strip_answer_controls && json_.value_or(false) && guard::HasLayoutControls(decoded)) {
    return StrCat(kDisplayControl, " spelled with a JSON escape");
  }
  return std::string();
}

bool EscapedContent::Released(std::string_view released, const guard::GuardConfig& config) {
  sent_tail_.append(released);
  const size_t tail = TailShowing(config);
  if (sent_tail_.size() <= tail + tail / 4) return true;
  const size_t keep = guard::TailShowing(sent_tail_, tail);
  if (keep > kMaxTail) return false;
  // Not between an escape's backslash and what it escapes: the tail begins as it did in the
  // whole text (review helper-89: a cut inside a run of backslashes read the escape after it as
  // text, here and for TakeDisplayControls).
  sent_tail_.erase(0, guard::UnescapedCut(sent_tail_, sent_tail_.size() - keep));
  return true;
}

}  // namespace pillar::stages
