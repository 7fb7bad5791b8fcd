// A stream's text screened as it arrives (screen.h: ScreenPrefix): where its hold-back window
// begins as each reader sees the text, and how much of it may go out now.
#include <algorithm>
#include <string>
#include <string_view>

#include "common/strings.h"
#include "guard/screen.h"
#include "guard/text_fold.h"

namespace pillar::guard {

namespace {

bool AsciiBlank(char c) { return kBlankBytes.find(c) != std::string_view::npos; }

// Where the window of the last `hold_back` bytes of `folded` begins in its original, counted as
// its reader sees them: a character that prints as nothing counts for nothing, and a run of
// blanks (of any script) for one.
size_t WindowStartIn(const FoldedText& folded, size_t hold_back) {
  const std::string_view f = folded.text();
  size_t at = f.size();
  for (size_t counted = 0; at > 0 && counted < hold_back; ++counted) {
    if (!AsciiBlank(f[at - 1])) {
      --at;
      continue;
    }
    while (at > 0 && AsciiBlank(f[at - 1])) --at;
  }
  // A terminal's overwrites put later bytes before earlier ones: the window holds every byte
  // shown in it.
  return at == f.size() ? folded.original().size() : folded.Span(at, f.size()).first;
}

// Where the window of the last `hold_back` bytes begins in `text`, counted as each reader sees
// them (the text as it is; a model, which reads a control as a blank; a terminal, which shows
// none and overwrites), the earliest of the three: padding made of characters that print as
// nothing, of controls, or of a terminal sequence holding blanks would otherwise push a value's
// start out of the window before its end arrives (found by review helper-67: a card around an
// OSC-8 link, a deny phrase padded with controls). Never more than hold_back + kMaxHeldRun
// bytes back: `padded` says when that bound cut it.
size_t WindowStart(std::string_view text, const FoldedText& kept, size_t hold_back, bool& padded) {
  size_t start = WindowStartIn(kept, hold_back);
  if (kept.has_controls()) {
    start =
        std::min(start, WindowStartIn(FoldedText(text, FoldedText::Controls::kPart), hold_back));
    // A terminal sequence still open at the end (its terminator to come) shows nothing of what
    // it holds: the window is counted before it.
    const size_t open = OpenSequenceStart(text);
    start = std::min(
        start,
        WindowStartIn(FoldedText(text.substr(0, open), FoldedText::Controls::kDrop), hold_back));
  }
  const size_t bound = hold_back + kMaxHeldRun;
  padded = text.size() > bound && start < text.size() - bound;
  return padded ? text.size() - bound : start;
}

// How much of `text` a stream may release now (ScreenPrefix). Each rule below only moves the
// point back, so they are applied until none moves it: a finding held back whole must not be
// cut by the point another rule chose. Nothing is held back for more than kMaxHeldRun bytes
// past the window: past that, a match still growing is taken as it stands.
size_t ReleasePoint(std::string_view text, const FoldedText& kept, const GuardConfig& config,
                    const ScreenResult& whole, size_t hold_back, bool final, bool& padded) {
  if (final) return text.size();
  size_t release = WindowStart(text, kept, hold_back, padded);
  // Whether a hold back to `begin` stays within the bound.
  auto holdable = [&](size_t begin) { return text.size() - begin <= kMaxHeldRun + hold_back; };
  // A deny phrase the text's end may still complete is held back from its start however far
  // its first word is, the window being counted in bytes and a phrase's words parted by any
  // run of what parts them (found by review helper-68: dashes, underscores, combining marks,
  // braille blanks or C1 controls between the words). Past the bound, the padding is said. With
  // no window too (hold_back_bytes = 0: found by review helper-69).
  const size_t open =
      config.deny != nullptr ? config.deny->OpenStart(text) : std::string_view::npos;
  if (open < release) {
    // Past the bound: padding, unless the text ends in one run without blanks that alone passes
    // it (a long base64 blob after a phrase's first word), which goes out as any such run does
    // (found by review helper-69: such a stream ended as padded).
    if (holdable(open)) {
      release = open;
    } else {
      size_t run = text.size();
      while (run > 0 && !AsciiBlank(text[run - 1])) --run;
      if (text.size() - run <= kMaxHeldRun) padded = true;
    }
  }
  const bool has_escape = text.find('\x1b') != std::string_view::npos;
  for (size_t before = text.size() + 1; release != before;) {
    before = release;
    // A finding that reaches past the point is held back whole (and the ones after it), and so
    // is a deny rule's match.
    for (const ScreenedFinding& f : whole.findings) {
      if (f.finding.begin < release && f.finding.end > release && holdable(f.finding.begin)) {
        release = f.finding.begin;
      }
    }
    for (const DenyMatch& m : whole.denied) {
      if (m.begin < release && m.end > release && holdable(m.begin)) release = m.begin;
    }
    // Nor is a run of non-blank bytes that has not ended yet: a value is only recognized whole
    // (a JWT's second '.', a key's last character), and once its start went out its rest would
    // not be recognized at all. Up to the bound, past which the run goes out as the window says.
    if (release > 0 && release < text.size() && !AsciiBlank(text[release - 1])) {
      size_t start = release;
      while (start > 0 && !AsciiBlank(text[start - 1])) --start;
      size_t end = release;
      while (end < text.size() && !AsciiBlank(text[end])) ++end;
      if (end == text.size() && text.size() - start <= kMaxHeldRun) release = start;
    }
    // Nor is a terminal sequence (found by review helper-68: a point after a line feed inside a
    // hyperlink's string made the rest read as a new line, which a terminal does not start).
    if (has_escape) release = SequenceStartAround(text, release);
    // Nor is a UTF-8 character cut in two: continuation bytes stay with their lead byte.
    while (release > 0 && release < text.size() &&
           (static_cast<unsigned char>(text[release]) & 0xC0) == 0x80) {
      --release;
    }
  }
  return release;
}

}  // namespace

PrefixResult ScreenPrefix(std::string_view text, const GuardConfig& config, size_t hold_back,
                          bool final, bool continues_line) {
  PrefixResult result;
  // Found by review helper-67: backspaces reaching back past the window made a terminal show a
  // key whose start had gone out with the line before them.
  // The text as it is, folded once for the checks below (most texts fold nothing: no copy).
  const FoldedText kept(text);
  if (continues_line && kept.has_controls() &&
      FoldedText(text, FoldedText::Controls::kDrop).overwrites_before()) {
    result.blocked = true;
    result.block_reason = "a terminal overwrite of text already sent";
    return result;
  }
  const ScreenResult whole = Screen(text, config);
  const size_t release = ReleasePoint(text, kept, config, whole, hold_back, final, result.padded);
  result.consumed = release;
  size_t copied = 0;
  for (const ScreenedFinding& f : whole.findings) {
    // A finding the point cuts is one past the bound (ReleasePoint): taken as it stands.
    if (f.finding.begin >= release) break;
    result.findings.push_back(f);
    if (f.action == Action::kBlock && !result.blocked) {
      result.blocked = true;
      result.block_reason =
          StrCat(EntityName(f.finding.type), " at bytes ", f.finding.begin, "-", f.finding.end);
    }
    if (f.action != Action::kRedact) continue;
    const EntityRule& rule = config.rule(f.finding.type);
    result.released.append(text.substr(copied, f.finding.begin - copied));
    const size_t end = std::min(f.finding.end, release);
    result.released.append(Redacted(text.substr(f.finding.begin, end - f.finding.begin),
                                    f.finding.type, rule.redaction, config.hash_key));
    copied = end;
  }
  for (const DenyMatch& m : whole.denied) {
    if (m.begin >= release) continue;  // seen again, whole, with the text that follows
    result.denied.push_back(m);
    if (m.rule->action == DenyAction::kBlock && !result.blocked) {
      result.blocked = true;
      result.block_reason = DenyReason(m);
    }
  }
  if (result.blocked) {
    result.released.clear();
  } else {
    result.released.append(text.substr(copied, release - copied));
  }
  return result;
}

}  // namespace pillar::guard
