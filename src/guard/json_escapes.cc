#include "guard/json_escapes.h"

#include <map>

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

void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
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
      // A high surrogate and its low one name one character; a lone one is kept as written.
      if (unit >= 0xD800 && unit <= 0xDBFF) {
        const int low = CodeUnitAt(text, i + 6);
        if (low < 0xDC00 || low > 0xDFFF) {
          out.append(text.substr(i, 6));
          i += 5;
          continue;
        }
        cp = 0x10000 + ((uint32_t(unit) - 0xD800) << 10) + (uint32_t(low) - 0xDC00);
        used = 12;
      } else if (unit >= 0xDC00 && unit <= 0xDFFF) {
        out.append(text.substr(i, 6));
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
  const std::string decoded = JsonDecoded(text);
  if (decoded == text) return std::string();
  auto counts = [&](std::string_view t) {
    std::map<EntityType, int> by_type;
    for (const ScreenedFinding& f : Screen(t, config).findings) {
      if (f.action != Action::kAllow) ++by_type[f.finding.type];
    }
    return by_type;
  };
  const std::map<EntityType, int> raw = counts(text);
  for (const auto& [type, count] : counts(decoded)) {
    auto it = raw.find(type);
    if (it == raw.end() || it->second < count) return std::string(EntityName(type));
  }
  return std::string();
}

}  // namespace pillar::guard
