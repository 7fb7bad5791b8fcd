// A model's answer as a reader will see it, made certain: without the bytes that make a terminal
// or a page show text in another place or order than it is written in.
//
//   std::string storage;
//   text = WithoutDisplayControls(text, storage);   // a copy only when it has any
//   Screen(text, config);                           // what is screened is what is shown
//
// Why: the guard finds values in the text as written. A terminal that reads "AKIAIOSFXX\b\b
// ODNN7EXAMPLE" shows an access key the text does not hold; so do a cursor movement
// ("ESC [ 2 D"), a carriage return that ends no line, and a page that lays out
// "\u202eELPMAXE7NNDOFSOIAIKA" right to left. The guard's terminal reading (FoldedText,
// Controls::kDrop) follows backspaces and carriage returns, but no model of a terminal is every
// terminal: wide characters, line wrapping and the sequences that move the cursor differ from one
// to the next (review helper-68). Without these bytes no reader moves back over what it showed,
// and what it shows is the text in order, which is what the guard screens. An answer with them is
// rare (a model writes them when asked to, or when an upstream is hostile), and what they would
// have done is display, not content: [guard] answer_controls = "strip" (the default) removes them
// from every text of an answer a client reads, "keep" passes them on, read as guard.md says.
//
// What goes:
// - the ASCII controls that print as nothing (InvisibleAscii: NUL, BEL, backspace, ESC, DEL, the
//   file, group, record and unit separators ...)
//   and a carriage return not followed by a line feed; tab, line feed, vertical tab, form feed and
//   CRLF stay;
// - an ESC's whole sequence as a terminal reads it (TerminalSequenceLength: "ESC [ 1 ; 31 m",
//   "ESC ] 8 ;; url ESC \\"); of one cut at the text's end, the ESC alone, so that the rest, if it
//   comes in the next chunk, shows as the text it then is;
// - the C1 controls U+0080-U+009F (a terminal may read U+009B as "ESC ["), and the bidirectional
//   formatting characters: the marks U+200E, U+200F and U+061C, the embeddings and overrides
//   U+202A-U+202E, the isolates U+2066-U+2069;
// - the characters the guard reads as nothing that a display may draw: the soft hyphen U+00AD
//   (a terminal draws '-'), the Hangul fillers U+115F, U+1160, U+3164 and U+FFA0 and the Khmer
//   inherent vowels U+17B4, U+17B5 (blanks), the Mongolian vowel separator U+180E (a space in
//   older fonts), U+FFF0-U+FFF8, the interlinear annotation marks U+FFF9-U+FFFB, the Egyptian
//   hieroglyph format controls U+13430-U+1343F and the shorthand format controls
//   U+1BCA0-U+1BCA3 (nothing on a terminal, a box where unassigned or unsupported): shown, they
//   would part what the guard reads as joined
//   ("XX\u00adAKIA..." is a key after a boundary on a terminal, review helper-72).
// Each is whole in the text it is removed from; the rest is left byte for byte (invalid UTF-8
// included: only a lead byte cut short right before a removed control goes with it, so that
// the removal joins no new character), so a text of valid UTF-8 stays valid.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pillar::guard {

// The length of the display control at text[at] (as above), 0 when there is none.
size_t DisplayControlLength(std::string_view text, size_t at);

bool HasDisplayControls(std::string_view text);

// The display controls no reading of the guard models: ESC (whose sequences move the cursor),
// the C1 controls, the bidirectional formatting characters and the characters a display may
// draw where the guard reads nothing (the non-ASCII ones above). The other ASCII controls
// (backspace, a carriage return, NUL ...) are read as a model and as a terminal reads them
// (FoldedText), so a text that holds them can be screened as it is.
bool LayoutControl(uint32_t c);
// Whether `text` (UTF-8) holds a layout control.
bool HasLayoutControls(std::string_view text);

// `text` without its display controls.
std::string WithoutDisplayControls(std::string_view text);
// The same, kept in `storage` when `text` has any (a view of `storage`); `text` itself when it
// has none, without a copy.
std::string_view WithoutDisplayControls(std::string_view text, std::string& storage);

}  // namespace pillar::guard
