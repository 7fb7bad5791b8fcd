// Fuzzes the guard's recognizers and screening (guard::Recognize, guard::Screen,
// guard::ScreenUrl): prompts, links and model outputs are untrusted text. Whatever the bytes,
// findings lie inside the text, in order, never overlapping, with scores in [0, 1]; a screened text
// that is not blocked is the input with exactly the redacted spans replaced. The injection score
// lies in [0, 1), and a deny rule's match lies inside the text. Folding look-alikes (text_fold.h)
// never lengthens a text, and its way back to the original is in range and in order (or, for a
// terminal's overwrites, in range). Taking out display controls (display_controls.h) leaves none,
// never lengthens a text, and keeps valid UTF-8 valid; taking out the escapes of layout
// controls (json_escapes.h) leaves none to take.
#include <simdjson.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "guard/deny_list.h"
#include "guard/display_controls.h"
#include "guard/injection.h"
#include "guard/json_escapes.h"
#include "guard/recognizer.h"
#include "guard/screen.h"
#include "guard/text_fold.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // Decoding JSON escapes never grows a text: each escape is at least as long as what it names.
  if (pillar::guard::JsonDecoded(text).size() > text.size()) __builtin_trap();
  // Taking out the escapes of layout controls never grows a text, and leaves none to take out
  // (no removal joins two surrogates into one); a tail is within the text.
  std::string storage;
  const std::string without(pillar::guard::WithoutEscapedDisplayControls(text, storage));
  std::string again_storage;
  if (without.size() > text.size() ||
      pillar::guard::WithoutEscapedDisplayControls(without, again_storage) != without) {
    __builtin_trap();
  }
  if (pillar::guard::TailShowing(text, size % 64) > text.size()) __builtin_trap();
  const pillar::guard::FoldedText folded(text);
  if (folded.text().size() > text.size()) __builtin_trap();
  for (size_t i = 0, previous = 0; i <= folded.text().size(); ++i) {
    const size_t begin = folded.Begin(i), end = folded.End(i);
    if (begin < previous || begin > text.size() || end > text.size()) __builtin_trap();
    if (i > 0 && end <= folded.Begin(i - 1)) __builtin_trap();
    previous = begin;
  }
  // As a terminal shows it, overwrites included: each byte's way back, and any range's, is in
  // the text and not empty.
  const pillar::guard::FoldedText shown(text, pillar::guard::FoldedText::Controls::kDrop);
  if (shown.text().size() > text.size()) __builtin_trap();
  for (size_t i = 0; i < shown.text().size(); ++i) {
    const auto [first, last] = shown.Span(i, i + 1);
    if (first >= last || last > text.size()) __builtin_trap();
    const auto [from, to] = shown.Span(0, i + 1);
    if (from > first || to < last || to > text.size()) __builtin_trap();
  }
  // Without its display controls: never longer, none left, and a second pass changes nothing;
  // what it leaves of valid UTF-8 is valid UTF-8 (only whole characters and sequences go).
  const std::string stripped = pillar::guard::WithoutDisplayControls(text);
  if (stripped.size() > text.size() || pillar::guard::HasDisplayControls(stripped)) {
    __builtin_trap();
  }
  if (pillar::guard::WithoutDisplayControls(stripped) != stripped) __builtin_trap();
  if (simdjson::validate_utf8(text.data(), text.size()) &&
      !simdjson::validate_utf8(stripped.data(), stripped.size())) {
    __builtin_trap();
  }
  pillar::guard::RecognizerOptions options;
  options.min_score = 0;
  size_t last_end = 0;
  for (const pillar::guard::Finding& f : pillar::guard::Recognize(text, options)) {
    if (f.begin >= f.end || f.end > text.size() || f.begin < last_end) __builtin_trap();
    if (f.score < 0 || f.score > 1) __builtin_trap();
    last_end = f.end;
  }
  static const pillar::guard::GuardConfig config;
  const pillar::guard::ScreenResult r = pillar::guard::Screen(text, config);
  if (r.blocked != r.text.empty() && !text.empty()) {
    // A blocked text is empty; one that is not is never empty unless the input was, or every
    // byte was redacted into a tag (which is never empty).
    if (!r.blocked) __builtin_trap();
  }
  if (!r.blocked) {
    std::string rebuilt;
    size_t copied = 0;
    for (const auto& s : r.findings) {
      if (s.action != pillar::guard::Action::kRedact) continue;
      rebuilt.append(text.substr(copied, s.finding.begin - copied));
      rebuilt.append(pillar::guard::Redacted(
          text.substr(s.finding.begin, s.finding.end - s.finding.begin), s.finding.type,
          config.rule(s.finding.type).redaction, config.hash_key));
      copied = s.finding.end;
    }
    rebuilt.append(text.substr(copied));
    if (rebuilt != r.text) __builtin_trap();
  }
  // A link read every way its readers read it (percent-decoded, base64 leniently): findings
  // within what was read, a block naming a reason.
  const pillar::guard::ScreenResult link = pillar::guard::ScreenUrl(text, config);
  if (link.blocked && link.block_reason.empty()) __builtin_trap();
  for (const auto& s : link.findings) {
    if (s.finding.begin >= s.finding.end) __builtin_trap();
  }
  const pillar::guard::InjectionScore injection = pillar::guard::ScoreInjection(text);
  if (injection.score < 0 || injection.score >= 1) __builtin_trap();
  static const auto deny = [] {
    pillar::guard::DenyRule words;
    words.name = "w";
    words.words = {"project nightingale", "ágata"};
    pillar::guard::DenyRule patterns;
    patterns.name = "p";
    patterns.patterns = {"(a+)+b", "db-[0-9]+\\.corp"};
    return *pillar::guard::DenyList::Build({words, patterns});
  }();
  for (const pillar::guard::DenyMatch& m : deny->Match(text)) {
    if (m.begin > m.end || m.end > text.size()) __builtin_trap();
  }
  // A phrase the end may still complete begins inside the text.
  const size_t open = deny->OpenStart(text);
  if (open != std::string_view::npos && open >= text.size()) __builtin_trap();
  return 0;
}
