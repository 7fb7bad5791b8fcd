#include "guard/text_fold.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <optional>

#include "guard/combining_marks.h"

namespace pillar::guard {
namespace {

constexpr char kDrop = 0;

// The code point of the UTF-8 sequence at text[at] and its length; nullopt for an ASCII byte or
// an invalid sequence (kept as bytes).
struct CodePoint {
  uint32_t value;
  size_t length;
};
std::optional<CodePoint> Decode(std::string_view text, size_t at) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[at + i]); };
  const unsigned char lead = byte(0);
  size_t length;
  uint32_t value;
  if (lead >= 0xC2 && lead < 0xE0) {
    length = 2;
    value = lead & 0x1F;
  } else if (lead >= 0xE0 && lead < 0xF0) {
    length = 3;
    value = lead & 0x0F;
  } else if (lead >= 0xF0 && lead < 0xF5) {
    length = 4;
    value = lead & 0x07;
  } else {
    return std::nullopt;
  }
  if (text.size() - at < length) return std::nullopt;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return std::nullopt;
    value = value << 6 | (byte(i) & 0x3F);
  }
  // Overlong forms and surrogates are not characters: kept as the bytes they are.
  if ((length == 3 && (value < 0x800 || (value >= 0xD800 && value <= 0xDFFF))) ||
      (length == 4 && (value < 0x10000 || value > 0x10FFFF))) {
    return std::nullopt;
  }
  return CodePoint{value, length};
}

bool Invisible(uint32_t c) {
  return c == 0x00AD || c == 0x034F || c == 0x061C || c == 0x115F || c == 0x1160 || c == 0x17B4 ||
         c == 0x17B5 || (c >= 0x180B && c <= 0x180F) || (c >= 0x200B && c <= 0x200F) ||
         (c >= 0x202A && c <= 0x202E) || (c >= 0x2060 && c <= 0x206F) || c == 0x3164 ||
         (c >= 0xFE00 && c <= 0xFE0F) || c == 0xFEFF || c == 0xFFA0 ||
         (c >= 0xFFF0 && c <= 0xFFFB) || (c >= 0x13430 && c <= 0x1343F) ||
         (c >= 0x1BCA0 && c <= 0x1BCA3) || (c >= 0x1D173 && c <= 0x1D17A) ||
         (c >= 0xE0000 && c <= 0xE0FFF);
}

bool Blank(uint32_t c) {
  return c == 0x0085 || c == 0x00A0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Hyphens, dashes and the signs that print as one: the general punctuation dashes and the minus
// sign, the modifier minus, the Armenian, Hebrew, Canadian syllabics and Mongolian hyphens, the
// hyphen bullet, the heavy minus, the supplemental punctuation dashes, the wave dashes and the
// katakana marks, the vertical and small forms, and the Yezidi hyphen.
bool Dash(uint32_t c) {
  static constexpr uint32_t kDashes[] = {0x02D7, 0x058A, 0x05BE, 0x1400, 0x1806, 0x2010, 0x2011,
                                         0x2012, 0x2013, 0x2014, 0x2015, 0x2043, 0x2212, 0x2796,
                                         0x2E17, 0x2E1A, 0x2E3A, 0x2E3B, 0x2E40, 0x301C, 0x3030,
                                         0x30A0, 0x30FC, 0xFE31, 0xFE32, 0xFE58, 0xFE63, 0x10EAD};
  static_assert(std::is_sorted(std::begin(kDashes), std::end(kDashes)));
  return std::binary_search(std::begin(kDashes), std::end(kDashes), c);
}

// Letterlike symbols (U+2100-U+213F) that stand in the holes of the mathematical alphabets
// (script, fraktur and double-struck capitals, the italic h, script e, g and o).
std::optional<char> LetterlikeOf(uint32_t c) {
  struct Pair {
    uint32_t code;
    char letter;
  };
  static constexpr Pair kLetterlike[] = {
      {0x2102, 'C'}, {0x210A, 'g'}, {0x210B, 'H'}, {0x210C, 'H'}, {0x210D, 'H'}, {0x210E, 'h'},
      {0x2110, 'I'}, {0x2111, 'I'}, {0x2112, 'L'}, {0x2115, 'N'}, {0x2119, 'P'}, {0x211A, 'Q'},
      {0x211B, 'R'}, {0x211C, 'R'}, {0x211D, 'R'}, {0x2124, 'Z'}, {0x2128, 'Z'}, {0x212C, 'B'},
      {0x212D, 'C'}, {0x212F, 'e'}, {0x2130, 'E'}, {0x2131, 'F'}, {0x2133, 'M'}, {0x2134, 'o'},
      {0x2113, 'l'}, {0x212A, 'K'},  // script small l, the Kelvin sign
  };
  for (const Pair& p : kLetterlike) {
    if (p.code == c) return p.letter;
  }
  return std::nullopt;
}

// Superscript, subscript and circled digits and letters, as NFKC reads them.
std::optional<char> CompatibilityOf(uint32_t c) {
  if (c == 0x00B9) return '1';
  if (c == 0x00B2 || c == 0x00B3) return char('2' + (c - 0x00B2));
  if (c == 0x2070) return '0';
  if (c >= 0x2074 && c <= 0x2079) return char('4' + (c - 0x2074));
  if (c >= 0x2080 && c <= 0x2089) return char('0' + (c - 0x2080));
  if (c >= 0x2460 && c <= 0x2468) return char('1' + (c - 0x2460));  // circled 1-9
  if (c == 0x24EA) return '0';
  if (c >= 0x24B6 && c <= 0x24CF) return char('A' + (c - 0x24B6));  // circled letters
  if (c >= 0x24D0 && c <= 0x24E9) return char('a' + (c - 0x24D0));
  if (c >= 0x2474 && c <= 0x247C) return char('1' + (c - 0x2474));  // parenthesized 1-9
  if (c >= 0x2488 && c <= 0x2490) return char('1' + (c - 0x2488));  // 1-9 with a full stop
  if (c >= 0x24F5 && c <= 0x24FD) return char('1' + (c - 0x24F5));  // double circled 1-9
  // Dingbat circled digits 1-9: negative, sans-serif, negative sans-serif.
  for (uint32_t first : {0x2776u, 0x2780u, 0x278Au}) {
    if (c >= first && c <= first + 8) return char('1' + (c - first));
  }
  // Subscript letters (a e o x, then h k l m n p s t).
  static constexpr char kSubscripts[] = "aeox?hklmnpst";
  if (c >= 0x2090 && c <= 0x209C && c != 0x2094) return kSubscripts[c - 0x2090];
  // Roman numerals that are letters: I V X L C D M, in capitals and small.
  if (c >= 0x2160 && c <= 0x217F) {
    const uint32_t i = (c - 0x2160) % 16;
    const char* kRoman = "I???V????X??LCDM";  // positions 0, 4, 9, 12-15 (others are numbers)
    if (kRoman[i] != '?') return char(c < 0x2170 ? kRoman[i] : kRoman[i] + 32);
  }
  return std::nullopt;
}

// The ASCII byte `c` folds to, kDrop to drop it, or nullopt to keep it.
std::optional<char> FoldOf(uint32_t c) {
  if (c < 0x80) return std::nullopt;
  if (Invisible(c) || IsCombiningMark(c)) return kDrop;
  if (Blank(c)) return ' ';
  if (c >= 0xFF01 && c <= 0xFF5E) return char(c - 0xFF01 + 0x21);
  if (c == 0xFE6B) return '@';
  // The full stops IDNA reads as a domain's dot (UTS 46: U+3002, U+FF61; U+FF0E is fullwidth
  // ASCII above) and the small one (review helper-117: jo@example\u3002org went unrecognised).
  if (c == 0x3002 || c == 0xFF61 || c == 0xFE52) return '.';
  if (Dash(c)) return '-';
  // Thirteen alphabets of 52 letters (A-Z, a-z) from U+1D400; their holes are unassigned.
  if (c >= 0x1D400 && c < 0x1D400 + 13 * 52) {
    const uint32_t i = (c - 0x1D400) % 52;
    return i < 26 ? char('A' + i) : char('a' + i - 26);
  }
  // Five sets of ten digits from U+1D7CE.
  if (c >= 0x1D7CE && c <= 0x1D7FF) return char('0' + (c - 0x1D7CE) % 10);
  if (c >= 0x2100 && c <= 0x213F) return LetterlikeOf(c);
  return CompatibilityOf(c);
}

// The length of the control sequence a terminal reads at ESC `at`, as Controls::kDrop drops it
// whole: CSI ("\x1b[1;31m", "\x1b[2K", "\x1b[m": '[', numbers between ';' or ':', at most two
// intermediate bytes, a final byte; within 256 bytes), OSC ("\x1b]8;;url\x1b\\") and the other
// string sequences (DCS, APC, PM, SOS) to their terminator within 4 KiB, a character-set choice
// ("\x1b(B") and a two-byte escape ("\x1b7"); 1 (the ESC alone) for anything else.
//
// `terminal` false (Controls::kPart, a model's reading): only colours ("\x1b[31m", "\x1b[m"),
// whose letter is always 'm'; of any other sequence, the ESC alone. A model reads
// "\x1b[AKIA..." or "\x1b[1;31AKIA..." with the key's 'A', where a terminal moves the cursor
// and shows "KIA...", and reads an OSC's URL, which a terminal hides.
size_t EscapeLength(std::string_view text, size_t at, bool terminal) {
  if (at + 1 >= text.size()) return 1;
  const auto next = static_cast<unsigned char>(text[at + 1]);
  if (!terminal && next != '[') return 1;
  if (next == ']' || next == 'P' || next == '_' || next == '^' || next == 'X') {
    // OSC, and the device control, application, privacy and start-of-string strings: to their
    // terminator (BEL for OSC, ST for all), within a bound, so that text full of unterminated
    // ones is still read in linear time.
    constexpr size_t kMaxString = 4096;
    for (size_t i = at + 2; i < text.size() && i - at < kMaxString; ++i) {
      if (text[i] == '\a' && next == ']') return i + 1 - at;
      // Any other escape ends the string too (a terminal then reads that escape's own
      // sequence), and the string's text is shown no more than with ST (found by review
      // helper-68: "\x1b]8;;zz zz\x1b[m" hid a card's gap from the guard only).
      if (text[i] == '\x1b')
        return i + 1 < text.size() && text[i + 1] == '\\' ? i + 2 - at : i - at;
    }
    return 1;
  }
  if (next >= 0x20 && next <= 0x2F) {  // ESC ( B and the like
    return at + 2 < text.size() && text[at + 2] >= 0x30 && text[at + 2] <= 0x7E ? 3 : 1;
  }
  if (next != '[') return next >= 0x30 && next <= 0x7E ? 2 : 1;
  // A terminal takes numbers of any length; a model's reading (kPart) keeps a long one's digits
  // ("\x1b[4111111111111111m"), the terminal's may drop them.
  const size_t max_sequence = terminal ? 256 : 32;
  size_t i = at + 2, digits = 0, intermediates = 0;
  if (i < text.size() && (text[i] == '?' || text[i] == '<' || text[i] == '=' || text[i] == '>')) {
    ++i;  // a private marker
  }
  for (; i < text.size() && i - at < max_sequence; ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b >= '0' && b <= '9' && intermediates == 0) {
      if ((digits > 0 || b != '0') && ++digits > 3 && !terminal) return 1;
    } else if ((b == ';' || b == ':') && intermediates == 0) {
      digits = 0;
    } else if (b >= 0x20 && b <= 0x2F && intermediates < 2) {
      ++intermediates;
    } else if (b >= 0x40 && b <= 0x7E) {
      return terminal || b == 'm' ? i + 1 - at : 1;  // the final byte
    } else {
      return 1;
    }
  }
  return 1;
}

// Whether the control sequence a terminal reads at ESC `at` is still open at the end of `text`
// (EscapeLength, terminal): more bytes could make it longer.
bool EscapeOpen(std::string_view text, size_t at) {
  if (at + 1 >= text.size()) return true;
  const auto next = static_cast<unsigned char>(text[at + 1]);
  if (next == ']' || next == 'P' || next == '_' || next == '^' || next == 'X') {
    constexpr size_t kMaxString = 4096;
    if (text.size() - at >= kMaxString) return false;
    for (size_t i = at + 2; i < text.size(); ++i) {
      if (text[i] == '\a' && next == ']') return false;
      if (text[i] == '\x1b') return i + 1 == text.size();
    }
    return true;
  }
  if (next >= 0x20 && next <= 0x2F) return at + 2 == text.size();
  if (next != '[') return false;
  return EscapeLength(text, at, true) == 1 && text.size() - at < 256 &&
         text.find_first_not_of("0123456789;:?<=> !\"#$%&'()*+,-./", at + 2) == std::string::npos;
}

}  // namespace

bool PrintsAsNothing(uint32_t c) { return Invisible(c) || IsCombiningMark(c); }

size_t TerminalSequenceLength(std::string_view text, size_t at) {
  return EscapeLength(text, at, /*terminal=*/true);
}

size_t SequenceStartAround(std::string_view text, size_t at) {
  constexpr size_t kLongest = 4096 + 2;
  size_t esc = text.find('\x1b', at > kLongest ? at - kLongest : 0);
  for (; esc != std::string_view::npos && esc < at; esc = text.find('\x1b', esc + 1)) {
    const size_t length = EscapeOpen(text, esc) ? text.size() - esc : EscapeLength(text, esc, true);
    if (esc + length > at) return esc;
  }
  return at;
}

size_t OpenSequenceStart(std::string_view text) {
  // The earliest still open: a string sequence holds the ESCs after it. Each look ends at the
  // next ESC at the latest, so the scan is linear in the 4 KiB looked at.
  constexpr size_t kLongest = 4096;
  size_t at = text.find('\x1b', text.size() > kLongest ? text.size() - kLongest : 0);
  for (; at != std::string_view::npos; at = text.find('\x1b', at + 1)) {
    if (EscapeOpen(text, at)) return at;
  }
  return text.size();
}

namespace {

// Whether text[at] is a control a terminal acts on: an invisible one, or a carriage return that
// does not end a line ("\r\n" is a line break, a lone '\r' returns to the line's start).
bool TerminalControl(std::string_view text, size_t at) {
  const auto c = static_cast<unsigned char>(text[at]);
  return InvisibleAscii(c) || (c == '\r' && (at + 1 == text.size() || text[at + 1] != '\n'));
}

// How many bytes from text[at], an InvisibleAscii byte, a terminal shows nothing for.
size_t InvisibleAsciiLength(std::string_view text, size_t at, bool terminal) {
  return text[at] == '\x1b' ? EscapeLength(text, at, terminal) : 1;
}

// The bytes among eight (the first in the lowest byte) that TerminalControl may be true of,
// each marked by its high bit: the InvisibleAscii bytes and '\r' (a line break when '\n' follows
// it). Exact, so a scan looks at a marked byte and at no other: a tab or a line break, about one
// word in ten of prose, is not marked. Each test "x in [lo, hi]" is two additions on seven-bit
// bytes, which cannot carry into the next byte; bytes with the high bit set are then taken out.
constexpr uint64_t ControlCandidates(uint64_t word) {
  constexpr uint64_t kOnes = 0x0101010101010101ULL;
  constexpr uint64_t kHighBits = 0x8080808080808080ULL;
  const uint64_t x = word & ~kHighBits;
  const auto in = [&](uint64_t lo, uint64_t hi) {
    return (x + kOnes * (0x80 - lo)) & ~(x + kOnes * (0x7F - hi));
  };
  return (in(0x00, 0x08) | in(0x0D, 0x1F) | in(0x7F, 0x7F)) & ~word & kHighBits;
}
static_assert(ControlCandidates(0x2020202020202020ULL) == 0);  // blanks
static_assert(ControlCandidates(0x0C0B0A0920090C0BULL) == 0);  // tab, line breaks
static_assert(ControlCandidates(0x1F1E1D1C20202020ULL) == 0x8080808000000000ULL);  // separators
static_assert(ControlCandidates(0xC3A3E280AF7E4161ULL) == 0);  // letters, '~', non-ASCII bytes
static_assert(ControlCandidates(0x7F202020201B0D08ULL) == 0x8000000000808080ULL);
static_assert(ControlCandidates(0x0E0E0E0E0E0E0E00ULL) == 0x8080808080808080ULL);

// The UTF-8 lead byte of `c`.
constexpr unsigned LeadByte(uint32_t c) {
  return c < 0x80 ? c : c < 0x800 ? 0xC0 | c >> 6 : c < 0x10000 ? 0xE0 | c >> 12 : 0xF0 | c >> 18;
}

// The lead bytes of every character that may fold: those of the ranges above (U+0085 to U+00B9:
// C2; U+02D7: CB; U+058A and U+05BE: D6; U+061C: D8; U+115F to U+180F: E1; U+2000 to U+2E40: E2;
// U+3000 to U+3164: E3; U+FE00 to U+FFF8: EF; U+10EAD, U+1BCA0 to U+1BCA3 and U+1D173 to
// U+1D7FF: F0; U+E0000 to U+E0FFF: F3) and of the combining marks (guard/combining_marks.h).
// Letters with accents (C3, C4 ...) and the letters of most scripts never fold, and are passed
// over without decoding.
constexpr std::array<bool, 256> MakeFoldLeads() {
  std::array<bool, 256> leads{};
  for (unsigned lead : {0xC2u, 0xCBu, 0xD6u, 0xD8u, 0xE1u, 0xE2u, 0xE3u, 0xEFu, 0xF0u, 0xF3u}) {
    leads[lead] = true;
  }
  for (const CodeRange& range : kCombiningMarks) {
    for (unsigned lead = LeadByte(range.first); lead <= LeadByte(range.last); ++lead) {
      leads[lead] = true;
    }
  }
  return leads;
}
constexpr std::array<bool, 256> kFoldLeads = MakeFoldLeads();

constexpr bool MayFold(unsigned char lead) { return kFoldLeads[lead]; }
static_assert(!MayFold(0xC3) && !MayFold(0xC4) && MayFold(0xCC) && MayFold(0xCD));

// The offset of the first character of `text` that folds, from `at`; text.size() when none does.
// With `drop_controls`, a control (TerminalControl) is one that folds; without, one is noted in
// `controls` and passed over.
size_t FirstFolding(std::string_view text, size_t at, bool drop_controls, bool& controls) {
  constexpr uint64_t kHighBits = 0x8080808080808080ULL;
  while (at < text.size()) {
    // Eight bytes at a time while eight are left: most text is mostly ASCII that is no control.
    // A word with a byte to look at (a control, or one with its high bit set) goes on from that
    // byte: the ones before it are neither.
    if (uint64_t word; text.size() - at >= 8) {
      std::memcpy(&word, text.data() + at, 8);
      const uint64_t look = (word & kHighBits) | ControlCandidates(word);
      if (look == 0) {
        at += 8;
        continue;
      }
      at += size_t(std::countr_zero(look)) / 8;
    }
    const auto lead = static_cast<unsigned char>(text[at]);
    if (lead < 0x80) {
      if (TerminalControl(text, at)) {
        if (drop_controls) return at;
        controls = true;
      }
      ++at;
      continue;
    }
    if (!MayFold(lead)) {
      ++at;  // a lead or continuation byte of a character that does not fold
      continue;
    }
    const std::optional<CodePoint> cp = Decode(text, at);
    if (cp && FoldOf(cp->value)) return at;
    at += cp ? cp->length : 1;
  }
  return text.size();
}

// UTF-8 characters in `text`: its bytes that are not continuation bytes.
size_t Characters(std::string_view text) {
  return size_t(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

}  // namespace

FoldedText::FoldedText(std::string_view text, Controls controls) : original_(text) {
  const bool drop_controls = controls != Controls::kKeep;
  const bool terminal = controls == Controls::kDrop;
  // Most text folds nothing: find the first character that does before copying anything.
  size_t at = FirstFolding(text, 0, drop_controls, has_controls_);
  if (at == text.size()) return;
  std::optional<CodePoint> cp;
  std::optional<char> fold;
  folded_.reserve(text.size());
  from_.reserve(text.size() + 1);
  folded_.append(text.substr(0, at));
  for (uint32_t i = 0; i < at; ++i) from_.push_back(i);
  // The line the cursor is on starts after the last line break before the first folding
  // character: a line feed, a vertical tab or a form feed, as Write ends lines (found by review
  // helper-68: a text with '\f' or '\v' read its last line as its first).
  Cursor cursor{folded_.size(), folded_.find_last_of("\n\v\f") + 1};  // npos + 1: the start
  cursor.line_chars = cursor.column =
      Characters(std::string_view(folded_).substr(cursor.line_start));
  while (at < text.size()) {
    const auto byte = static_cast<unsigned char>(text[at]);
    if ((byte < 0x20 || byte == 0x7F) && !has_controls_) has_controls_ = TerminalControl(text, at);
    if (terminal && (byte == '\b' || byte == '\r')) {
      MoveBack(cursor, byte == '\r');
      ++at;
      continue;
    }
    if (terminal && byte == '\t' && cursor.at < folded_.size()) {
      // Over what the line shows, a tab moves the cursor to the next stop (every 8 columns)
      // without writing (found by review helper-68: "AKIAIOSF000\r\tODNN7EXAMPLE" showed the
      // key whole). Columns are counted a character each, as the rest of this reading does.
      size_t moves = 8 - cursor.column % 8;
      for (; moves > 0 && cursor.at < folded_.size(); --moves) {
        const char shown = folded_[cursor.at];
        if (shown == '\n' || shown == '\v' || shown == '\f') break;
        ++cursor.at;
        ++cursor.column;
        while (cursor.at < folded_.size() &&
               (static_cast<unsigned char>(folded_[cursor.at]) & 0xC0) == 0x80) {
          ++cursor.at;  // over a whole character
        }
      }
      // Past the line's end, the cells it moves over show blank: one blank stands for them (a
      // reading is never longer than its text, and the recognizers read a run of blanks as one).
      if (moves > 0) Write(" ", at, cursor);
      ++at;
      continue;
    }
    if (drop_controls && InvisibleAscii(byte)) {
      if (controls == Controls::kPart && (folded_.empty() || folded_.back() != ' ')) {
        folded_.push_back(' ');
        from_.push_back(uint32_t(at));
        cursor.at = folded_.size();
        cursor.column = ++cursor.line_chars;
      }
      at += InvisibleAsciiLength(text, at, terminal);
      continue;
    }
    cp = byte < 0x80 ? std::nullopt : Decode(text, at);
    fold = cp ? FoldOf(cp->value) : std::nullopt;
    const size_t length = cp ? cp->length : 1;
    if (!fold) {  // kept: each byte from itself
      Write(text.substr(at, length), at, cursor);
    } else if (*fold != kDrop) {
      Write(std::string_view(&*fold, 1), at, cursor);
    }
    at += length;
  }
  from_.push_back(uint32_t(text.size()));
}

void FoldedText::MoveBack(Cursor& cursor, bool to_line_start) {
  // The first line may continue one shown before the text: a return goes to that line's start,
  // a backspace at the text's start goes into it.
  if (cursor.line_start == 0 && (to_line_start || cursor.at == 0)) before_start_ = true;
  if (to_line_start) {
    cursor.at = cursor.line_start;
    cursor.column = 0;
    return;
  }
  if (cursor.at == cursor.line_start) return;  // a backspace stops at the line's start
  --cursor.at;
  --cursor.column;
  while (cursor.at > cursor.line_start &&
         (static_cast<unsigned char>(folded_[cursor.at]) & 0xC0) == 0x80) {
    --cursor.at;  // back over a whole character
  }
}

void FoldedText::Write(std::string_view bytes, size_t from, Cursor& cursor) {
  // A line break ends the line where the terminal wrote last: the next line starts after all of
  // it. So does an overwrite that would move too much of the line (a character of another
  // length, far from the line's end): the text is then read on as if appended, which keeps the
  // fold linear in the text's length.
  constexpr size_t kMaxShift = 256;
  const bool line_break =
      bytes.size() == 1 && (bytes[0] == '\n' || bytes[0] == '\v' || bytes[0] == '\f');
  if (before_start_ && cursor.line_start == 0) {
    if (line_break) {
      before_start_ = false;
    } else {
      overwrites_before_ = true;
    }
  }
  if (cursor.at < folded_.size() && !line_break) {
    size_t old_length = 1;
    while (cursor.at + old_length < folded_.size() &&
           (static_cast<unsigned char>(folded_[cursor.at + old_length]) & 0xC0) == 0x80) {
      ++old_length;
    }
    if (old_length == bytes.size() || folded_.size() - cursor.at <= kMaxShift) {
      folded_.replace(cursor.at, old_length, bytes);  // in place when the lengths agree
      if (old_length != bytes.size()) {
        from_.erase(from_.begin() + long(cursor.at), from_.begin() + long(cursor.at + old_length));
        from_.insert(from_.begin() + long(cursor.at), bytes.size(), 0);
      }
      for (size_t i = 0; i < bytes.size(); ++i) from_[cursor.at + i] = uint32_t(from + i);
      cursor.at += bytes.size();
      ++cursor.column;  // one character for another: the line's count stays
      overwritten_ = true;
      return;
    }
  }
  folded_.append(bytes);
  for (size_t i = 0; i < bytes.size(); ++i) from_.push_back(uint32_t(from + i));
  cursor.at = folded_.size();
  if (line_break) {
    cursor.line_start = cursor.at;
    cursor.line_chars = 0;
  } else {
    ++cursor.line_chars;
  }
  cursor.column = cursor.line_chars;
}

size_t FoldedText::Begin(size_t at) const { return changed() ? from_[at] : at; }

std::pair<size_t, size_t> FoldedText::Span(size_t begin, size_t end) const {
  if (!overwritten_ || begin >= end) return {Begin(begin), End(end)};
  size_t first = original_.size(), last = 0;
  for (size_t i = begin; i < end; ++i) {
    first = std::min(first, size_t(from_[i]));
    last = std::max(last, End(i + 1));
  }
  return {first, last};
}

size_t FoldedText::End(size_t end) const {
  if (!changed() || end == 0) return end;
  const size_t from = from_[end - 1];
  // A folded character (ASCII where the original has a sequence) ends with its sequence.
  if (static_cast<unsigned char>(folded_[end - 1]) < 0x80 &&
      static_cast<unsigned char>(original_[from]) >= 0x80) {
    return from + Decode(original_, from)->length;
  }
  return from + 1;
}

}  // namespace pillar::guard
