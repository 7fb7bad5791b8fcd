#include "guard/json_escapes.h"

#include <map>

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

size_t TailShowing(std::string_view text, size_t visible) {
  size_t seen = 0;
  size_t i = text.size();
  while (i > 0 && seen < visible) {
    if (i >= 6) {
      const int unit = CodeUnitAt(text, i - 6);
      if (unit >= 0) {
        const bool nothing =
            (unit >= 0x200B && unit <= 0x200F) || (unit >= 0x2060 && unit <= 0x2064) ||
            unit == 0xFEFF || unit == 0x00AD || unit == 0x034F || unit == 0x180E ||
            (unit >= 0x0300 && unit <= 0x036F) || (unit >= 0xFE00 && unit <= 0xFE0F);
        if (!nothing) ++seen;
        i -= 6;
        continue;
      }
    }
    --i;
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) ++seen;
  }
  return text.size() - i;
}

std::map<std::string, int> ValuesFound(std::string_view text, const GuardConfig& config) {
  std::map<std::string, int> values;
  for (const ScreenedFinding& f : Screen(text, config).findings) {
    ++values[std::string(text.substr(f.finding.begin, f.finding.end - f.finding.begin))];
  }
  return values;
}

std::string NewValue(std::string_view reading, const std::map<std::string, int>& shown,
                     const GuardConfig& config) {
  std::map<std::string, int> seen;
  for (const ScreenedFinding& f : Screen(reading, config).findings) {
    if (f.action == Action::kAllow) continue;
    const std::string value(reading.substr(f.finding.begin, f.finding.end - f.finding.begin));
    const auto it = shown.find(value);
    if (++seen[value] > (it == shown.end() ? 0 : it->second)) {
      return std::string(EntityName(f.finding.type));
    }
  }
  return std::string();
}

std::string EscapedFinding(std::string_view text, const GuardConfig& config) {
  if (!MayHaveJsonEscapes(text)) return std::string();
  // The values the text shows as it is, by what they are and how often: one the decoded text
  // shows more often was spelled with escapes (review helper-84: counting them by type let a
  // decoy the decoding broke stand for the value it made; helper-85: a raw copy, redacted,
  // stood for an escaped one the client decodes).
  const std::map<std::string, int> shown = ValuesFound(text, config);
  // Decoded again while escapes remain: JSON in a string of JSON (review helper-84).
  std::string decoded(text);
  for (int level = 0; level < kMaxJsonLevels && MayHaveJsonEscapes(decoded); ++level) {
    std::string next = JsonDecoded(decoded);
    if (next == decoded) break;
    decoded = std::move(next);
    if (std::string type = NewValue(decoded, shown, config); !type.empty()) return type;
  }
  return std::string();
}

}  // namespace pillar::guard
