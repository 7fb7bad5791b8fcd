#include "guard/json_escapes.h"

#include <map>
#include <vector>

#include "common/strings.h"
#include "guard/display_controls.h"
#include "guard/screen.h"
#include "guard/text_fold.h"

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

// The character that ends at text[end - 1], as a reader that decodes JSON escapes reads it: a
// "\u" escape (a surrogate pair's two), or a UTF-8 sequence; its length in `text`, 0 when the
// byte there is ASCII, invalid UTF-8 or a continuation byte of no whole character.
size_t CharacterBefore(std::string_view text, size_t end, uint32_t& c) {
  if (end >= 6) {
    if (const int unit = CodeUnitAt(text, end - 6); unit >= 0) {
      c = uint32_t(unit);
      if (const int high = end >= 12 ? CodeUnitAt(text, end - 12) : -1;
          unit >= 0xDC00 && unit <= 0xDFFF && high >= 0xD800 && high <= 0xDBFF) {
        c = 0x10000 + ((uint32_t(high) - 0xD800) << 10) + (uint32_t(unit) - 0xDC00);
        return 12;
      }
      return 6;
    }
  }
  size_t lead = end;
  while (lead > 0 && end - lead < 4 &&
         (static_cast<unsigned char>(text[lead - 1]) & 0xC0) == 0x80) {
    --lead;
  }
  if (lead == 0 || lead == end) return 0;
  const auto byte = static_cast<unsigned char>(text[lead - 1]);
  const size_t length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 0;
  if (length != end - lead + 1) return 0;
  c = byte & (0x7F >> length);
  for (size_t k = lead; k < end; ++k) c = c << 6 | (static_cast<unsigned char>(text[k]) & 0x3F);
  return length;
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
    uint32_t c = 0;
    const size_t length = CharacterBefore(text, i, c);
    // What the folding drops counts for nothing, escaped or not (review helper-88: an escaped
    // tag character, two code units, counted as two and pushed a card's start out).
    if (length == 0) {
      --i;
      if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) ++seen;
      continue;
    }
    if (!PrintsAsNothing(c)) ++seen;
    i -= length;
  }
  return text.size() - i;
}

std::string_view WithoutEscapedDisplayControls(std::string_view text, std::string& storage,
                                               bool starts_escaped, bool ends_open) {
  if (!MayHaveJsonEscapes(text)) return text;
  std::string out;
  size_t kept = 0;  // text[kept, i) is yet to be copied
  // Where the hex digits of a "\u" that is no escape (fewer than four) end: an escape removed
  // right there would make one of them with what follows it ("\u00" "\u200e" "AD" would leave
  // "\u00AD"; review helper-89), so it is replaced by a blank, and the text stays what it was,
  // JSON no client parses.
  size_t open_u_end = std::string_view::npos;
  for (size_t i = starts_escaped ? 1 : 0; i < text.size(); ++i) {
    if (text[i] != '\\') continue;
    if (i + 1 == text.size()) break;  // a backslash whose escape is still to come
    size_t used = 2;
    uint32_t c = 0;
    if (const int unit = CodeUnitAt(text, i); unit >= 0) {
      c = uint32_t(unit);
      used = 6;
      if (const int low = CodeUnitAt(text, i + 6);
          unit >= 0xD800 && unit <= 0xDBFF && low >= 0xDC00 && low <= 0xDFFF) {
        c = 0x10000 + ((uint32_t(unit) - 0xD800) << 10) + (uint32_t(low) - 0xDC00);
        used = 12;
      } else if (ends_open && unit >= 0xD800 && unit <= 0xDBFF && i + 12 > text.size()) {
        break;  // its low half may come next
      }
    } else if (text[i + 1] == 'u') {
      size_t end = i + 2;
      while (end < text.size() && end < i + 6 && HexDigitValue(text[end]) >= 0) ++end;
      open_u_end = end;
      ++i;
      continue;
    } else if (text[i + 1] == 'b' || text[i + 1] == 'r') {
      c = text[i + 1] == 'b' ? '\b' : '\r';
    }
    // A carriage return ends a line when a line feed follows it; whether one does may be in
    // what comes.
    bool goes = false;
    if (c == '\r') {
      const size_t next = i + used;
      if (ends_open && next + 6 > text.size()) break;
      goes = !(text.substr(next).starts_with("\\n") || CodeUnitAt(text, next) == '\n');
    } else {
      // A high surrogate not in a pair goes too: kept, it could pair with a low one on the
      // other side of a removed escape ("\ud80d\u202e\udc30" would leave U+13430, a layout
      // control). A lone low one stays: it pairs with nothing that comes before it, and where
      // a stream's text is taken from its middle, it may be a pair's second half.
      goes = LayoutControl(c) || (c >= 0xD800 && c <= 0xDBFF) ||
             (c > 0 && c < 0x80 && InvisibleAscii(static_cast<unsigned char>(c))) ||
             (c == 0 && used == 6);
    }
    if (goes) {
      out.append(text.substr(kept, i - kept));
      if (i == open_u_end) out.push_back(' ');
      kept = i + used;
    }
    i += used - 1;
  }
  if (kept == 0) return text;
  out.append(text.substr(kept));
  storage = std::move(out);
  return storage;
}

size_t BackslashesBefore(std::string_view text, size_t at) {
  size_t run = 0;
  while (run < at && text[at - 1 - run] == '\\') ++run;
  return run;
}

size_t UnescapedCut(std::string_view text, size_t at) {
  return BackslashesBefore(text, at) % 2 == 1 ? at - 1 : at;
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

std::string EscapedFinding(std::string_view text, const GuardConfig& config,
                           std::string* decoded_once) {
  if (decoded_once != nullptr) decoded_once->assign(text);
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
    if (level == 0 && decoded_once != nullptr) *decoded_once = next;
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
