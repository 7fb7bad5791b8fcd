#include "common/strings.h"

namespace pillar {

void strings_internal::Append(std::string& out, double value) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, end);
}

std::vector<std::string_view> Split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t end = text.find(separator, start);
    if (end == std::string_view::npos) {
      parts.push_back(text.substr(start));
      return parts;
    }
    parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = char(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = char(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string Quoted(std::string_view value, size_t max) {
  if (value.size() > max) return StrCat("(", value.size(), " bytes)");
  return StrCat("'", value, "'");
}

std::string JoinInts(const std::vector<int64_t>& values, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out.append(separator);
    strings_internal::Append(out, values[i]);
  }
  return out;
}

std::string Hex(uint64_t value, int width) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  do {
    out.insert(out.begin(), kDigits[value & 0xf]);
    value >>= 4;
  } while (value != 0);
  if (int(out.size()) < width) out.insert(0, size_t(width) - out.size(), '0');
  return out;
}

void AppendUtf8(std::string& out, uint32_t code_point) {
  const uint32_t c = code_point;
  if (c < 0x80) {
    out.push_back(char(c));
  } else if (c < 0x800) {
    out.push_back(char(0xc0 | (c >> 6)));
    out.push_back(char(0x80 | (c & 0x3f)));
  } else if (c < 0x10000) {
    out.push_back(char(0xe0 | (c >> 12)));
    out.push_back(char(0x80 | ((c >> 6) & 0x3f)));
    out.push_back(char(0x80 | (c & 0x3f)));
  } else {
    out.push_back(char(0xf0 | (c >> 18)));
    out.push_back(char(0x80 | ((c >> 12) & 0x3f)));
    out.push_back(char(0x80 | ((c >> 6) & 0x3f)));
    out.push_back(char(0x80 | (c & 0x3f)));
  }
}

std::string ForTerminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x20 || byte == 0x7f) {
      out += "\\x";
      out += Hex(byte, 2);
      continue;
    }
    // In UTF-8: the C1 controls (U+0080-U+009F, which some terminals obey: U+009B is CSI) and the
    // bidirectional controls that reorder what a line shows (U+061C, U+200E-U+200F,
    // U+202A-U+202E, U+2066-U+2069) (review helper-127).
    uint32_t point = 0;
    size_t length = 0;
    if (byte == 0xc2 && i + 1 < text.size()) {
      point = 0x80 | (static_cast<unsigned char>(text[i + 1]) & 0x3fu);
      const auto b1 = static_cast<unsigned char>(text[i + 1]);
      length = b1 >= 0x80 && b1 <= 0x9f ? 2 : 0;
    } else if (byte == 0xd8 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) == 0x9c) {
      point = 0x061c;
      length = 2;
    } else if (byte == 0xe2 && i + 2 < text.size()) {
      const auto b1 = static_cast<unsigned char>(text[i + 1]);
      const auto b2 = static_cast<unsigned char>(text[i + 2]);
      point = 0x2000 | ((b1 & 0x3fu) << 6) | (b2 & 0x3fu);
      const bool bidi = (point >= 0x200e && point <= 0x200f) ||
                        (point >= 0x202a && point <= 0x202e) ||
                        (point >= 0x2066 && point <= 0x2069);
      length = (b1 & 0xc0) == 0x80 && (b2 & 0xc0) == 0x80 && bidi ? 3 : 0;
    }
    if (length > 0) {
      out += "\\u";
      out += Hex(point, 4);
      i += length - 1;
      continue;
    }
    out += text[i];
  }
  return out;
}

std::string_view CutForLog(std::string_view text, size_t max) {
  if (text.size() <= max) return text;
  auto token = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("-_.+=~%@").find(c) != std::string_view::npos;
  };
  size_t end = max;
  if (token(text[max])) {  // the cut falls inside a run: drop the part before it too
    while (end > 0 && token(text[end - 1])) --end;
  }
  return text.substr(0, end);
}

}  // namespace pillar
