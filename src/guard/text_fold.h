// A text with its look-alike characters folded to the ASCII they stand for, as a reader sees
// them, and the way back to the original's offsets: so that "zq＠example.org", a card written in
// fullwidth or mathematical digits, an access key with a zero-width space or a variation
// selector inside, or "123‐45‐6789" with Unicode hyphens are recognized like their plain forms.
//
//   FoldedText folded(text);
//   for (Finding f : Scan(folded.text())) { f.begin = folded.Begin(f.begin); ... End(f.end) }
//
// What folds (a conservative part of NFKC, plus the invisible characters NFKC keeps):
// - characters that print as nothing are dropped: the soft hyphen, zero-width space and joiners,
//   direction marks and embeddings, word joiner and invisible operators, variation selectors,
//   the byte order mark, tag characters, the Hangul fillers, the default-ignorable U+FFF0-U+FFF8
//   and U+1BCA0-U+1BCA3, and the combining marks (guard/combining_marks.h: accents, strokes,
//   circles and vowel signs drawn on the character before them: "4\u0303111" reads "4111"); and,
//   with Controls::kDrop, the
//   ASCII controls other than the blanks (NUL, BEL, ESC, DEL ...) and a terminal's control
//   sequences whole ("\x1b[1;31m", "\x1b(B", "\x1b]8;;url\x1b\\"), as a terminal shows them;
//   there, too, a backspace or a carriage return moves back within the line, and what follows
//   overwrites what was there ("AKIAIOSX\bFODNN7..." shows "AKIAIOSFODNN7...");
// - blanks of other scripts and line separators (NBSP, NEL, U+2000-U+200A, U+2028, U+2029,
//   U+202F, U+205F, U+3000) become a space;
// - fullwidth ASCII (U+FF01-U+FF5E) and the small '@' (U+FE6B) become ASCII;
// - mathematical letters and digits (U+1D400-U+1D7FF: bold, italic, script, fraktur,
//   double-struck, sans-serif, monospace, and the letterlike symbols in their holes, such as
//   U+210E) become ASCII letters and digits, and so do superscript, subscript and circled digits
//   and circled letters;
// - hyphens, dashes and the signs that print as one (U+2010-U+2015, U+2212, U+FE63, U+FF0D,
//   the modifier minus, the Armenian, Hebrew, Mongolian and Canadian hyphens, the hyphen
//   bullet, the wave dashes, the katakana marks ...) become '-'.
// Every other byte is kept as it is, invalid UTF-8 included (and tabs, line breaks and the ASCII
// separators, which part values as a space does). A folded character is one byte, so
// the folded text is never longer than the original.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pillar::guard {

// The ASCII bytes that print as nothing: the C0 controls but the blanks (tab, line breaks, form
// feed, vertical tab), and DEL. The file, group, record and unit separators are among them: a
// terminal shows nothing for them, where a model reads a break (review helper-73:
// "AKIAIOSF\x1fODNN7EXAMPLE" is a key on a terminal).
constexpr bool InvisibleAscii(unsigned char c) {
  return (c < 0x20 && !(c >= '\t' && c <= '\r')) || c == 0x7F;
}

// Whether the character `c` is one the folding drops as printing nothing (a zero-width space, a
// soft hyphen, a tag character, a combining mark ...).
bool PrintsAsNothing(uint32_t c);

// The length of the control sequence a terminal reads at the ESC text[at], as Controls::kDrop
// drops it whole (1: the ESC alone, when no whole sequence follows it).
size_t TerminalSequenceLength(std::string_view text, size_t at);

// Where a terminal control sequence that `text` ends inside begins ("...\x1b]8;;a b c" with
// its terminator still to come), text.size() when none: a terminal shows nothing of the bytes
// from there once the sequence ends, so a stream counts none of them as shown yet.
size_t OpenSequenceStart(std::string_view text);

// Where the terminal control sequence that offset `at` falls inside begins (its ESC before `at`,
// the sequence reaching past it, or still open at the text's end), `at` when none does: a
// stream is never cut inside one, whose bytes a terminal reads together (a line feed inside a
// hyperlink's string ends no line).
size_t SequenceStartAround(std::string_view text, size_t at);

class FoldedText {
 public:
  // Controls (NUL, ESC and the sequences it begins ...) make two readings of one text: a model
  // reads a NUL or an escape as a break between values ("KEY=AKIA...\0CARD=4111...",
  // "\x1b[31m4111..."), a terminal shows the values around it joined ("4111\x1b[0m1111...").
  // kPart reads each control and colour sequence as one space (other sequences as the bytes
  // after their ESC, which a model reads), kDrop drops controls and every terminal sequence
  // whole, kKeep leaves them as they are. Callers that must find what either reader sees read kPart
  // and kDrop (has_controls() says when they differ from kKeep).
  enum class Controls { kKeep, kPart, kDrop };
  explicit FoldedText(std::string_view text, Controls controls = Controls::kKeep);
  // Whether the original has a control that Controls::kDrop drops or follows (a carriage return
  // not followed by a line feed counts), found in the folding's own pass, in every mode: a
  // caller reads a text as kKeep, and only when it has controls reads it again as kPart and
  // kDrop (most texts have none, and are read once).
  bool has_controls() const { return has_controls_; }
  FoldedText(const FoldedText&) = delete;
  FoldedText& operator=(const FoldedText&) = delete;

  std::string_view original() const { return original_; }
  // Controls::kDrop: whether a terminal would write over what came before the text (a carriage
  // return, or backspaces past its start, on its first line, then a character): when the text
  // continues a line shown before it, what it shows depends on that line.
  bool overwrites_before() const { return overwrites_before_; }

  // The folded text; the original itself when nothing in it folds (no copy is made then).
  std::string_view text() const { return changed() ? std::string_view(folded_) : original_; }
  bool changed() const { return !from_.empty(); }

  // The original offset where the character of folded byte `at` begins (the original's size for
  // `at` == text().size()).
  size_t Begin(size_t at) const;
  // The original offset just past the character of folded byte `end` - 1: [Begin(b), End(e)) is
  // the original of folded [b, e), with the invisible characters inside it, unless the text
  // was overwritten (Span).
  size_t End(size_t end) const;
  // The original range [first, last) holding every byte folded [begin, end) came from. A
  // terminal's overwrites (Controls::kDrop) put later bytes before earlier ones: the range then
  // spans both, and what lies between.
  std::pair<size_t, size_t> Span(size_t begin, size_t end) const;

 private:
  // Where a terminal writes next in folded_ (Controls::kDrop): the end, unless a backspace or a
  // carriage return moved it back within the current line.
  struct Cursor {
    size_t at;
    size_t line_start;
    // Characters of the current line before `at`, and in all: kept as the cursor moves, so that a
    // tab finds its column without counting the line again (counting it made a long line and
    // many tabs quadratic: 1 MB and 200,000 tabs took 21 s).
    size_t column = 0;
    size_t line_chars = 0;
  };
  void MoveBack(Cursor& cursor, bool to_line_start);
  // Writes one character, from original offset `from`, at the cursor.
  void Write(std::string_view bytes, size_t from, Cursor& cursor);

  std::string_view original_;
  std::string folded_;
  std::vector<uint32_t> from_;  // by folded byte: the original offset it came from
  bool overwritten_ = false;    // from_ is not in order
  bool has_controls_ = false;
  // On the first line, the cursor went back before the text's start (overwrites_before).
  bool before_start_ = false;
  bool overwrites_before_ = false;
};

}  // namespace pillar::guard
