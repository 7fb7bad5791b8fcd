#include "guard/json_escapes.h"

#include <set>

#include "common/strings.h"
#include "guard/screen.h"

namespace pillar::guard {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The code unit of "\uXXXX" at `text[i]` (i at the backslash), or -1.
int CodeUnitAt(std::string_view text, size_t i) {
  if (i + 6 > text.size() || text[i] != '\\' || text[i + 1] != 'u') return -1;
  int unit = 0;
  for (size_t k = i + 2; k < i + 6; ++k) {
    const int digit = HexValue(text[k]);
    if (digit < 0) return -1;
    unit = unit * 16 + digit;
  }
  return unit;
}

}  // namespace

std::string JsonDecoded(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 >= text.size()) {
      out.push_back(text[i]);
      continue;
    }
    const char next = text[i + 1];
    if (const int unit = CodeUnitAt(text, i); unit >= 0) {
      uint32_t cp = uint32_t(unit);
      size_t used = 6;
      // A high surrogate and its low one name one character. A lone one is a character no
      // reader shows as a word's (a blank here), not its six bytes, whose hex digits would
      // glue to the value after it (review helper-84: "\ud8004111111111111111").
      if (unit >= 0xD800 && unit <= 0xDBFF) {
        const int low = CodeUnitAt(text, i + 6);
        if (low < 0xDC00 || low > 0xDFFF) {
          out.push_back(' ');
          i += 5;
          continue;
        }
        cp = 0x10000 + ((uint32_t(unit) - 0xD800) << 10) + (uint32_t(low) - 0xDC00);
        used = 12;
      } else if (unit >= 0xDC00 && unit <= 0xDFFF) {
        out.push_back(' ');
        i += 5;
        continue;
      }
      AppendUtf8(out, cp);
      i += used - 1;
      continue;
    }
    char decoded = 0;
    switch (next) {
      case 'n':
        decoded = '\n';
        break;
      case 't':
        decoded = '\t';
        break;
      case 'r':
        decoded = '\r';
        break;
      case 'b':
        decoded = '\b';
        break;
      case 'f':
        decoded = '\f';
        break;
      case '"':
        decoded = '"';
        break;
      case '\\':
        decoded = '\\';
        break;
      case '/':
        decoded = '/';
        break;
      default:
        break;
    }
    if (decoded == 0) {
      out.push_back(text[i]);
      continue;
    }
    out.push_back(decoded);
    ++i;
  }
  return out;
}

std::string EscapedFinding(std::string_view text, const GuardConfig& config) {
  if (!MayHaveJsonEscapes(text)) return std::string();
  // The values the text shows as it is, by what they are: one the decoded text shows that is
  // not among them was spelled with escapes (review helper-84: counting them let a decoy that
  // the decoding broke stand for the value it made).
  std::set<std::string> shown;
  for (const ScreenedFinding& f : Screen(text, config).findings) {
    shown.insert(std::string(text.substr(f.finding.begin, f.finding.end - f.finding.begin)));
  }
  // Decoded again while escapes remain: JSON in a string of JSON (review helper-84).
  std::string decoded(text);
  for (int level = 0; level < kMaxJsonLevels && MayHaveJsonEscapes(decoded); ++level) {
    std::string next = JsonDecoded(decoded);
    if (next == decoded) break;
    decoded = std::move(next);
    for (const ScreenedFinding& f : Screen(decoded, config).findings) {
      if (f.action == Action::kAllow) continue;
      const std::string value = decoded.substr(f.finding.begin, f.finding.end - f.finding.begin);
      if (!shown.contains(value)) return std::string(EntityName(f.finding.type));
    }
  }
  return std::string();
}

}  // namespace pillar::guard
