#include "guard/display_controls.h"

#include <array>
#include <cstdint>

#include "guard/text_fold.h"

namespace pillar::guard {
namespace {

// The bytes a display control can begin with: the invisible ASCII controls, '\r', and the lead
// bytes of the characters DisplayControl names. Anything else is passed over with one look-up.
constexpr std::array<bool, 256> MakeLeads() {
  std::array<bool, 256> leads{};
  for (int c = 0; c < 0x80; ++c) leads[size_t(c)] = InvisibleAscii(static_cast<unsigned char>(c));
  for (unsigned char lead : {'\r', '\xC2', '\xD8', '\xE1', '\xE2', '\xE3', '\xEF', '\xF0'}) {
    leads[lead] = true;
  }
  return leads;
}
constexpr std::array<bool, 256> kLeads = MakeLeads();

// The non-ASCII display controls: the C1 controls; the bidirectional marks, embeddings,
// overrides and isolates; and the characters the guard reads as nothing that a display may draw
// (a terminal draws the soft hyphen as '-' and the Hangul fillers as blanks, a page draws an
// unassigned U+FFF0 as a box): they would part, where it shows, what the guard reads as joined
// (review helper-72: "XX\u00adAKIA..." showed a key after a boundary the guard did not see).
constexpr bool DisplayControl(uint32_t c) {
  return (c >= 0x80 && c <= 0x9F) || c == 0x00AD || c == 0x061C || c == 0x115F || c == 0x1160 ||
         c == 0x17B4 || c == 0x17B5 || c == 0x180E || c == 0x200E || c == 0x200F ||
         (c >= 0x202A && c <= 0x202E) || (c >= 0x2066 && c <= 0x2069) || c == 0x3164 ||
         c == 0xFFA0 || (c >= 0xFFF0 && c <= 0xFFFB) || (c >= 0x13430 && c <= 0x1343F) ||
         (c >= 0x1BCA0 && c <= 0x1BCA3);
}

// The length of the well-formed UTF-8 sequence at text[at] (2 to 4 bytes) and its code point;
// 0 when there is none.
size_t Sequence(std::string_view text, size_t at, uint32_t& c) {
  const auto lead = static_cast<unsigned char>(text[at]);
  const size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
  if (text.size() - at < length) return 0;
  c = lead & (0x7F >> length);
  for (size_t i = 1; i < length; ++i) {
    const auto next = static_cast<unsigned char>(text[at + i]);
    if ((next & 0xC0) != 0x80) return 0;
    c = c << 6 | (next & 0x3F);
  }
  return length;
}

// Takes off the end of `shown` a lead byte without all its continuation bytes (invalid UTF-8,
// which is otherwise kept as it is): joined to what follows a removed control, it could make a
// new character, and that one a display control ("\xc2\x1a\x9a" would leave U+009A, found by
// fuzz_guard).
// Repeated while the end is such a lead ("\xc2\xc2" + removed + "\xad" would leave U+00AD).
void DropCutSequence(std::string& shown) {
  while (!shown.empty()) {
    size_t lead = shown.size();
    while (lead > 0 && shown.size() - lead < 4 &&
           (static_cast<unsigned char>(shown[lead - 1]) & 0xC0) == 0x80) {
      --lead;
    }
    if (lead == 0) return;
    const auto byte = static_cast<unsigned char>(shown[lead - 1]);
    if (byte < 0xC0) return;  // ASCII, or continuation bytes without a lead: nothing to join
    const size_t length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : 2;
    if (shown.size() - (lead - 1) >= length) return;  // a whole sequence
    shown.resize(lead - 1);
  }
}

}  // namespace

size_t DisplayControlLength(std::string_view text, size_t at) {
  const auto byte = static_cast<unsigned char>(text[at]);
  if (!kLeads[byte]) return 0;
  if (byte == '\r') return at + 1 < text.size() && text[at + 1] == '\n' ? 0 : 1;
  if (byte == 0x1B) return TerminalSequenceLength(text, at);
  if (byte < 0x80) return 1;
  uint32_t c = 0;
  const size_t length = Sequence(text, at, c);
  return length > 0 && DisplayControl(c) ? length : 0;
}

bool LayoutControl(uint32_t c) { return c == 0x1B || DisplayControl(c); }

bool HasLayoutControls(std::string_view text) {
  for (size_t at = 0; at < text.size(); ++at) {
    const auto byte = static_cast<unsigned char>(text[at]);
    if (byte == 0x1B) return true;
    uint32_t c = 0;
    if (byte >= 0xC0 && Sequence(text, at, c) > 0 && DisplayControl(c)) return true;
  }
  return false;
}

bool HasDisplayControls(std::string_view text) {
  for (size_t at = 0; at < text.size(); ++at) {
    if (DisplayControlLength(text, at) > 0) return true;
  }
  return false;
}

std::string WithoutDisplayControls(std::string_view text) {
  std::string shown;
  shown.reserve(text.size());
  size_t kept = 0;  // text[kept, at) is yet to be copied
  for (size_t at = 0; at < text.size();) {
    const size_t length = DisplayControlLength(text, at);
    if (length == 0) {
      ++at;
      continue;
    }
    shown.append(text.substr(kept, at - kept));
    DropCutSequence(shown);
    at += length;
    kept = at;
  }
  shown.append(text.substr(kept));
  return shown;
}

std::string_view WithoutDisplayControls(std::string_view text, std::string& storage) {
  if (!HasDisplayControls(text)) return text;
  storage = WithoutDisplayControls(text);
  return storage;
}

}  // namespace pillar::guard
