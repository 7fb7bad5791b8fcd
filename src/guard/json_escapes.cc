#include "guard/json_escapes.h"

#include <map>
#include <vector>

#include "common/strings.h"
#include "guard/screen.h"

namespace pillar::guard {
namespace {

// The code unit a "\u" escape and its four hex digits at `text[i]` name (i at the backslash), or
// -1.
int CodeUnitAt(std::string_view text, size_t i) {
  if (i + 6 > text.size() || text[i] != '\\' || text[i + 1] != 'u') return -1;
  int unit = 0;
  for (size_t k = i + 2; k < i + 6; ++k) {
    const int digit = HexDigitValue(text[k]);
    if (digit < 0) return -1;
    unit = unit * 16 + digit;
  }
  return unit;
}

}  // namespace

std::string JsonDecoded(std::string_view text) { return JsonDecoded(text, nullptr); }

std::string JsonDecoded(std::string_view text, std::vector<uint32_t>* from) {
  std::string out;
  out.reserve(text.size());
  if (from != nullptr) from->clear();
  // Appends what the bytes text[raw...] decode to, each output byte noted as coming from `raw`.
  auto emit = [&](std::string_view bytes, size_t raw) {
    out.append(bytes);
    if (from != nullptr) from->insert(from->end(), bytes.size(), uint32_t(raw));
  };
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 >= text.size()) {
      emit(text.substr(i, 1), i);
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
          emit(" ", i);
          i += 5;
          continue;
        }
        cp = 0x10000 + ((uint32_t(unit) - 0xD800) << 10) + (uint32_t(low) - 0xDC00);
        used = 12;
      } else if (unit >= 0xDC00 && unit <= 0xDFFF) {
        emit(" ", i);
        i += 5;
        continue;
      }
      std::string utf8;
      AppendUtf8(utf8, cp);
      emit(utf8, i);
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
      emit(text.substr(i, 1), i);
      continue;
    }
    emit(std::string_view(&decoded, 1), i);
    ++i;
  }
  if (from != nullptr) from->push_back(uint32_t(text.size()));
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
  // Each value the decoded text shows must be one the text as it is shows at the same place,
  // with the same characters: otherwise escapes spelled it, or an escape beside it changed it
  // (review helpers 84 to 86: a decoy the decoding breaks, a raw copy redacted beside an
  // escaped one, a raw copy an escape after it lengthens), and a redaction of the raw text would
  // not line up with what the client decodes.
  const ScreenResult raw = Screen(text, config);
  auto shown_at = [&](size_t begin, size_t end, EntityType type) {
    for (const ScreenedFinding& f : raw.findings) {
      if (f.finding.begin == begin && f.finding.end == end && f.finding.type == type) return true;
    }
    return false;
  };
  // Decoded again while escapes remain: JSON in a string of JSON (review helper-84). `to_raw`
  // maps each decoded byte to the byte of `text` it came from.
  std::string decoded(text);
  std::vector<uint32_t> to_raw(text.size() + 1);
  for (size_t k = 0; k <= text.size(); ++k) to_raw[k] = uint32_t(k);
  for (int level = 0; level < kMaxJsonLevels && MayHaveJsonEscapes(decoded); ++level) {
    std::vector<uint32_t> from;
    std::string next = JsonDecoded(decoded, &from);
    if (next == decoded) break;
    for (uint32_t& k : from) k = to_raw[k];
    decoded = std::move(next);
    to_raw = std::move(from);
    for (const ScreenedFinding& f : Screen(decoded, config).findings) {
      if (f.action == Action::kAllow) continue;
      const size_t begin = to_raw[f.finding.begin];
      const size_t end = to_raw[f.finding.end];
      const std::string_view value(decoded.data() + f.finding.begin,
                                   f.finding.end - f.finding.begin);
      if (text.substr(begin, end - begin) != value || !shown_at(begin, end, f.finding.type)) {
        return std::string(EntityName(f.finding.type));
      }
    }
  }
  return std::string();
}

}  // namespace pillar::guard
