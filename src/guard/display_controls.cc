#include "guard/display_controls.h"

#include <array>
#include <cstdint>

#include "guard/text_fold.h"

namespace pillar::guard {
namespace {

// The bytes a display control can begin with: the invisible ASCII controls, '\r', and the lead
// bytes of the C1 controls (C2), of U+061C (D8) and of the other bidirectional controls (E2).
// Anything else is passed over with one look-up.
constexpr std::array<bool, 256> MakeLeads() {
  std::array<bool, 256> leads{};
  for (int c = 0; c < 0x80; ++c) leads[size_t(c)] = InvisibleAscii(static_cast<unsigned char>(c));
  leads['\r'] = leads[0xC2] = leads[0xD8] = leads[0xE2] = true;
  return leads;
}
constexpr std::array<bool, 256> kLeads = MakeLeads();

}  // namespace

size_t DisplayControlLength(std::string_view text, size_t at) {
  const auto byte = static_cast<unsigned char>(text[at]);
  if (!kLeads[byte]) return 0;
  if (byte == '\r') return at + 1 < text.size() && text[at + 1] == '\n' ? 0 : 1;
  if (byte == 0x1B) return TerminalSequenceLength(text, at);
  if (byte < 0x80) return 1;
  if (at + 1 >= text.size()) return 0;
  const auto second = static_cast<unsigned char>(text[at + 1]);
  if (byte == 0xC2) return second >= 0x80 && second <= 0x9F ? 2 : 0;  // U+0080-U+009F
  if (byte == 0xD8) return second == 0x9C ? 2 : 0;                    // U+061C
  if (at + 2 >= text.size()) return 0;
  const auto third = static_cast<unsigned char>(text[at + 2]);
  if (second == 0x80 && (third == 0x8E || third == 0x8F || (third >= 0xAA && third <= 0xAE))) {
    return 3;  // U+200E, U+200F, U+202A-U+202E
  }
  if (second == 0x81 && third >= 0xA6 && third <= 0xA9) return 3;  // U+2066-U+2069
  return 0;
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
