#include "guard/text_fold.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "absl/time/clock.h"
#include "guard/deny_list.h"
#include "guard/recognizer.h"
#include "guard/screen.h"

namespace pillar::guard {
namespace {

using namespace std::string_literals;

TEST(TextFoldTest, PlainTextIsNotCopied) {
  const std::string text = "olá, maria@example.com \xff";  // accents and invalid UTF-8 kept
  FoldedText folded(text);
  EXPECT_FALSE(folded.changed());
  EXPECT_EQ(folded.text().data(), text.data());
  EXPECT_EQ(folded.Begin(3), 3u);
  EXPECT_EQ(folded.End(5), 5u);
}

TEST(TextFoldTest, LookAlikesFoldAndOffsetsLeadBack) {
  // "a" U+FF20 (fullwidth @, 3 bytes) "b" U+200B (zero-width space, dropped) "c" U+1D7D1
  // (bold 3, 4 bytes) U+00A0 (no-break space, 2 bytes) U+2011 (non-breaking hyphen) "\xff".
  const std::string text = "a\uff20b\u200bc\U0001d7d1\u00a0\u2011\xff";
  FoldedText folded(text);
  ASSERT_TRUE(folded.changed());
  EXPECT_EQ(folded.text(), "a@bc3 -\xff");
  EXPECT_EQ(folded.Begin(1), 1u);  // '@' is the fullwidth one at byte 1
  EXPECT_EQ(folded.End(2), 4u);    // and ends with its three bytes
  EXPECT_EQ(folded.Begin(3), 8u);  // 'c' comes after the dropped space
  EXPECT_EQ(folded.End(5), 13u);   // '3' is U+1D7D1, four bytes from 9
  EXPECT_EQ(folded.Begin(8), text.size());
  EXPECT_EQ(folded.End(8), text.size());
  // The span of "b" through "c" holds the zero-width space between them.
  EXPECT_EQ(folded.End(4) - folded.Begin(2), 5u);
  // The full stops a domain may be written with (IDNA maps them to '.').
  EXPECT_EQ(FoldedText("jo@example\u3002org a\uff61b c\ufe52d").text(), "jo@example.org a.b c.d");
  // Mathematical letters of every alphabet: bold, italic, script, fraktur, monospace.
  FoldedText letters("\U0001d400\U0001d44e\U0001d4b8\U0001d52f\U0001d68c");
  EXPECT_EQ(letters.text(), "Aacrc");
  // The letterlike symbols in the alphabets' holes, circled, superscript and subscript forms.
  FoldedText holes("\u210e\u2102\u211d\u24b6\u24d1\u2460\u00b2\u2079\u2080");
  EXPECT_EQ(holes.text(), "hCRAb1290");
  FoldedText more(
      "\u212a\u2113\u2776\u2780\u278a\u2474\u2488\u24f5\u2090\u2093\u2160\u2179\u216c\u217f");
  EXPECT_EQ(more.text(), "Kl111111axIxLm");
  // An overlong form or a surrogate is not a character: kept as bytes, not folded.
  FoldedText overlong("\uff20\xe0\x82\xa0\xed\xa0\x80");
  EXPECT_EQ(overlong.text(), "@\xe0\x82\xa0\xed\xa0\x80");
}

TEST(TextFoldTest, RecognizersAndRulesSeeThroughLookAlikes) {
  const GuardConfig config;
  // A fullwidth '@', a card in bold digits, an SSN with non-breaking hyphens, a key with a
  // zero-width space and a variation selector inside: each is found where it was, whole.
  const std::string mail = "write zq\uff20example.org now";
  ScreenResult r = Screen(mail, config);
  ASSERT_EQ(r.findings.size(), 1u) << mail;
  EXPECT_EQ(r.findings[0].finding.type, EntityType::kEmailAddress);
  EXPECT_EQ(r.findings[0].finding.begin, 6u);
  EXPECT_EQ(r.findings[0].finding.end, mail.size() - 4);
  EXPECT_EQ(r.text, "write <EMAIL_ADDRESS> now");

  std::string card = "card ";
  for (char d : std::string("4111111111111111")) {
    const uint32_t c = 0x1D7CE + uint32_t(d - '0');  // bold digits
    card += {char(0xF0), char(0x80 | (c >> 12 & 0x3F)), char(0x80 | (c >> 6 & 0x3F)),
             char(0x80 | (c & 0x3F))};
  }
  std::vector<Finding> found = Recognize(card, RecognizerOptions{});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].type, EntityType::kCreditCard);
  EXPECT_EQ(found[0].begin, 5u);
  EXPECT_EQ(found[0].end, card.size());
  // Masked as the digits they stand for, the last four kept.
  EXPECT_EQ(Redacted(card.substr(5), EntityType::kCreditCard, Redaction::kMask, ""),
            "************1111");

  found = Recognize("ssn 078\u201105\u20111120", RecognizerOptions{});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].type, EntityType::kUsSsn);
  // Found by a review (helper-39): the modifier minus and the Armenian hyphen read as '-' too,
  // and so does every other dash the fold knows.
  for (const char* dash : {"\u02d7", "\u058a", "\u05be", "\u1806", "\u2043", "\u2796", "\u2e3a",
                           "\u30fc", "\ufe58", "\U00010ead"}) {
    const std::string ssn = std::string("ssn 078") + dash + "05" + dash + "1120";
    found = Recognize(ssn, RecognizerOptions{});
    ASSERT_EQ(found.size(), 1u) << ssn;
    EXPECT_EQ(found[0].type, EntityType::kUsSsn) << ssn;
    EXPECT_EQ(FoldedText(dash).text(), "-") << ssn;
  }

  r = Screen("key AKIAIOSF\u200bODNN7\ufe0fEXAMPLE ok", config);
  EXPECT_TRUE(r.blocked);
  EXPECT_EQ(r.block_reason, "SECRET at bytes 4-30");

  // Deny words through mathematical letters, NEL and a variation selector inside a word.
  auto list = DenyList::Build({DenyRule{.name = "codenames",
                                        .action = DenyAction::kBlock,
                                        .words = {"project nightingale"},
                                        .patterns = {}}});
  ASSERT_TRUE(list.ok()) << list.status();
  for (const char* text : {
           "about \U0001d429\U0001d42b\U0001d428\U0001d423\U0001d41e\U0001d41c\U0001d42d "
           "nightingale",                      // bold "project"
           "about project\u0085nightingale",   // NEL between the words
           "about proj\ufe0fect nightingale",  // a variation selector inside
           "about project\u200bnightingale",   // a zero-width space parting them
       }) {
    const std::vector<DenyMatch> m = (*list)->Match(text);
    ASSERT_EQ(m.size(), 1u) << text;
    EXPECT_EQ(m[0].begin, 6u) << text;  // where the phrase was, whole
    EXPECT_EQ(m[0].end, std::string_view(text).size()) << text;
  }
  EXPECT_TRUE((*list)->Match("about projectnightingale").empty());
}

// Found by a review (helper-50): values split by NUL bytes or a terminal's colour sequences were
// not read whole, though a terminal shows them whole. Controls::kDrop reads them so.
TEST(TextFoldTest, CombiningMarksReadAsTheCharacterTheyAreDrawnOn) {
  // A tilde, an acute, a stroke and an enclosing circle on a card's digits: a reader reads the
  // digits, and so does the guard; the finding spans the marks, the redaction takes them too.
  const std::string card = "card 4\u0303111 1\u0301111 1\u20dd111 11\u033611 end";
  std::vector<Finding> found = Recognize(card, RecognizerOptions{});
  ASSERT_EQ(found.size(), 1u) << card;
  EXPECT_EQ(found[0].type, EntityType::kCreditCard);
  EXPECT_EQ(found[0].begin, 5u);
  EXPECT_EQ(found[0].end, card.size() - 4);
  EXPECT_EQ(Screen(card, GuardConfig()).text, "card <CREDIT_CARD> end");
  // Marks of every script, not only the Latin accents (review helper-72): an enclosing
  // circle, a Japanese voicing mark, a Hebrew point, an Arabic vowel, a Thai vowel, a Devanagari
  // nukta, a musical mark.
  for (const char* mark :
       {"\u0489", "\u3099", "\u05b0", "\u064b", "\u0e31", "\u093c", "\U0001d167", "\U0001e000"}) {
    const std::string marked = std::string("card 4") + mark + "111 1111 1111 1111 end";
    found = Recognize(marked, RecognizerOptions{});
    ASSERT_EQ(found.size(), 1u) << marked;
    EXPECT_EQ(found[0].type, EntityType::kCreditCard) << marked;
  }
  // Default-ignorable characters print as nothing: they join what is around them.
  // So do the interlinear annotation marks and the Egyptian hieroglyph format controls, and
  // the ASCII separators on a terminal (review helper-73).
  for (const std::string& text : {std::string("key AKIAIOSF\U0001bca0ODNN7EXAMPLE ok"),
                                  std::string("key AKIAIOSF\ufff8ODNN7EXAMPLE ok"),
                                  std::string("key AKIAIOSF\ufff9ODNN7EXAMPLE ok"),
                                  std::string("key AKIAIOSF\U00013430ODNN7EXAMPLE ok"),
                                  std::string("key AKIAIOSF\x1fODNN7EXAMPLE ok")}) {
    EXPECT_TRUE(Screen(text, GuardConfig()).blocked) << text;
  }
  // Decomposed accents in words fold to the letters (the reading only: the text is unchanged).
  const std::string word = "nu\u0301mero";
  EXPECT_EQ(FoldedText(word).text(), "numero");
  EXPECT_EQ(FoldedText(word).original(), word);
}

TEST(TextFoldTest, ControlsAndTerminalSequencesPrintAsNothingToATerminal) {
  constexpr auto kDrop = FoldedText::Controls::kDrop;
  const std::string text = "a\0b\x1b[1;31mc\x1b[0m\x7f"s +
                           "d\x1b[?25l\x07"
                           "e";
  FoldedText folded(text, kDrop);
  ASSERT_TRUE(folded.changed());
  EXPECT_EQ(folded.text(), "abcde");
  EXPECT_EQ(folded.Begin(1), 2u);   // 'b' after the NUL
  EXPECT_EQ(folded.Begin(2), 10u);  // 'c' after "\x1b[1;31m"
  EXPECT_EQ(folded.End(4), 17u);    // 'd' ends at 17, after "\x1b[0m" and DEL
  EXPECT_EQ(folded.Begin(5), text.size());
  // The default keeps them; kPart reads each as one space, as a model reads a break.
  EXPECT_FALSE(FoldedText(text).changed());
  FoldedText parted(text, FoldedText::Controls::kPart);
  EXPECT_EQ(parted.text(), "a b c d [?25l e");  // a cursor's sequence is its bytes to a model
  EXPECT_EQ(parted.Begin(7), 17u);              // the space of its ESC
  // To a model, a sequence without a number is its bytes: "[A" stays, where a terminal moves.
  EXPECT_EQ(FoldedText("k \x1b[AKIA", FoldedText::Controls::kPart).text(), "k [AKIA");
  EXPECT_EQ(FoldedText("k \x1b[AKIA", kDrop).text(), "k KIA");
  EXPECT_TRUE(FoldedText(text).has_controls());
  // Blanks are not controls that print as nothing: a tab or a line break parts values.
  EXPECT_FALSE(FoldedText("a\tb\nc\r\nd\v\f and more than eight bytes").has_controls());
  EXPECT_FALSE(FoldedText("a\tb\nc\r\nd\v\f", kDrop).changed());
  // The ASCII separators are, to a terminal (review helper-73): a model reads a break.
  EXPECT_TRUE(FoldedText("a\x1c and more than eight bytes").has_controls());
  EXPECT_EQ(FoldedText("a\x1c"
                       "b\x1f"
                       "c",
                       kDrop)
                .text(),
            "abc");
  EXPECT_EQ(FoldedText("a\x1c"
                       "b\x1f"
                       "c",
                       FoldedText::Controls::kPart)
                .text(),
            "a b c");
  // A carriage return that ends no line moves a terminal back to the line's start.
  EXPECT_TRUE(FoldedText("a\tb\nc\rd\f and more than eight bytes").has_controls());
  EXPECT_TRUE(FoldedText("ends with\r").has_controls());
  // A terminal takes a number of any length and shows nothing of it; a model reads its digits,
  // which kPart keeps ("tput sgr0" (ESC ( B, ESC [ m), a hyperlink (OSC 8) and a two-byte escape
  // go whole in the terminal's reading).
  EXPECT_EQ(FoldedText("\x1b[4111111111111111m", kDrop).text(), "");
  EXPECT_EQ(FoldedText("\x1b[4111111111111111m", FoldedText::Controls::kPart).text(),
            " [4111111111111111m");
  EXPECT_EQ(FoldedText("1\x1b[0000m2\x1b(B\x1b[m3\x1b]8;;http://a\x1b\\4\x1b]0;t\a5\x1b"
                       "7"
                       "6",
                       kDrop)
                .text(),
            "123456");
  // A string ended by another escape than ST ends there, its text shown no more than with ST
  // (found by review helper-68), and that escape's own sequence is read next.
  EXPECT_EQ(FoldedText("4111 1111 \x1b]8;;zz zz\x1b[m1111 1111", kDrop).text(),
            "4111 1111 1111 1111");
  EXPECT_EQ(FoldedText("a\x1b]\x1b[mb", kDrop).text(), "ab");
  // Cut short: only the ESC goes.
  EXPECT_EQ(FoldedText("x\x1b[", kDrop).text(), "x[");
  EXPECT_EQ(FoldedText("x\x1b]8;;http://a", kDrop).text(), "x]8;;http://a");
  // Eight printable bytes at a time, and a control anywhere among them found.
  for (size_t at = 0; at < 16; ++at) {
    std::string plain(16, 'x');
    plain[at] = '\x01';
    EXPECT_EQ(FoldedText(plain, kDrop).text(), std::string(15, 'x')) << at;
    EXPECT_TRUE(FoldedText(plain).has_controls()) << at;
    plain[at] = '\x7f';
    EXPECT_EQ(FoldedText(plain, kDrop).text(), std::string(15, 'x')) << at;
    EXPECT_TRUE(FoldedText(plain).has_controls()) << at;
  }
}

// has_controls(), for every ASCII byte at every place among sixteen (eight at a time, then the
// tail), with and without a character that folds before it (the fast pass then hands over to the
// one that copies), in each mode.
TEST(TextFoldTest, TheFoldingFindsEveryControlAndNoOtherByte) {
  const std::string fullwidth_a = "\xEF\xBC\xA1";  // U+FF21, folds to 'A'
  for (int byte = 0; byte < 0x80; ++byte) {
    for (size_t at = 0; at < 16; ++at) {
      for (const bool folds_before : {false, true}) {
        std::string text(16, 'x');
        text[at] = char(byte);
        if (folds_before) text.insert(0, fullwidth_a);
        // A lone carriage return, and the C0 controls but tab and line breaks, and DEL (a '\r'
        // here is followed by 'x', or ends the text).
        const bool expected =
            byte == '\r' || byte == 0x7F || (byte < 0x20 && (byte < '\t' || byte > '\r'));
        for (const auto mode : {FoldedText::Controls::kKeep, FoldedText::Controls::kPart,
                                FoldedText::Controls::kDrop}) {
          EXPECT_EQ(FoldedText(text, mode).has_controls(), expected)
              << byte << " at " << at << " mode " << int(mode) << " folds before " << folds_before;
        }
      }
    }
  }
  // A carriage return that ends a line is none, at the end of eight bytes or not.
  for (size_t at = 0; at < 15; ++at) {
    std::string text(16, 'x');
    text[at] = '\r';
    text[at + 1] = '\n';
    EXPECT_FALSE(FoldedText(text).has_controls()) << at;
    EXPECT_FALSE(FoldedText(text, FoldedText::Controls::kDrop).has_controls()) << at;
  }
}

// The recognizers read both: a value joined by controls, and values parted by them.
TEST(TextFoldTest, RecognizersReadTextWithControlsAsATerminalAndAsAModel) {
  const GuardConfig config;
  const std::string card = "card 4111\x1b[0m1111\x1b[0m1111\x1b[0m1111 ok";
  std::vector<Finding> found = Recognize(card, RecognizerOptions{});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].type, EntityType::kCreditCard);
  EXPECT_EQ(found[0].begin, 5u);
  EXPECT_EQ(found[0].end, card.size() - 3);
  found = Recognize(
      "card 4111\0"
      "1111\0"
      "1111\0"
      "1111 ok"s,
      RecognizerOptions{});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].type, EntityType::kCreditCard);
  ScreenResult r = Screen("key AKIA\0IOSFODNN7EXAMPLE ok"s, config);
  EXPECT_TRUE(r.blocked);
  EXPECT_EQ(r.block_reason, "SECRET at bytes 4-25");
  r = Screen("mail zq\x1b[1mexample\x1b[0m@example.org", config);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].finding.type, EntityType::kEmailAddress);
  // Found by review helper-51: values parted by NULs (an environment block, find -print0), by a
  // BEL or DEL, or a colour reset glued to the next word were lost when controls were only
  // dropped; "\x1b[AKIA..." lost its 'A' to a cursor movement.
  const std::string environ =
      "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\0GITHUB_TOKEN=ghp_"
      "a1B2c3D4e5a1B2c3D4e5a1B2c3D4e5abcdef"
      "\0CARD=4111111111111111\0SSN=078-05-1120\0HOME=/root\0"s;
  std::vector<std::string> types;
  for (const Finding& f : Recognize(environ, RecognizerOptions{})) {
    types.emplace_back(EntityName(f.type));
  }
  EXPECT_EQ(types, (std::vector<std::string>{"SECRET", "SECRET", "CREDIT_CARD", "US_SSN"}));
  for (const std::string& text :
       {"key AKIAIOSFODNN7EXAMPLE\0secret"s, "card 4111 1111 1111 1111\a99"s,
        "ssn 078-05-1120\x7f"
        "abc"s,
        "key \x1b[33mAKIAIOSFODNN7EXAMPLE\x1b[0mfoo"s, "key \x1b[AKIAIOSFODNN7EXAMPLE"s,
        "iban \x1b[DE89370400440532013000"s, "c 4111\x1b[0000m1111\x1b[0000m1111\x1b[0000m1111"s,
        "c 4111\x1b(B\x1b[m1111\x1b(B\x1b[m1111\x1b(B\x1b[m1111"s, "c 078-05-\x1b]8;;\x1b\\1120"s,
        "card \x1b[31m4111111111111111\x1b[32m2024"s,
        // Found by review helper-52: numbers of any length, long sequences, device control and
        // application strings, an OSC over 512 bytes, all as a terminal takes them.
        "k AKIA\x1b[1000mIOSFODNN7EXAMPLE"s,
        "k AKIA\x1b[1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1mIOSFODNN7EXAMPLE"s,
        "k AKIA\x1bPqqq\x1b\\IOSFODNN7EXAMPLE"s, "k AKIA\x1b_app\x1b\\IOSFODNN7EXAMPLE"s,
        "k AKIA\x1b]0;"s + std::string(600, 'x') + "\aIOSFODNN7EXAMPLE"}) {
    EXPECT_EQ(Recognize(text, RecognizerOptions{}).size(), 1u) << text;
  }
  // Masked as a terminal shows it: no sequence is left half masked to swallow what follows.
  EXPECT_EQ(Redacted("078\x1b[0m-05-1120", EntityType::kUsSsn, Redaction::kMask, ""),
            "***-**-****");
  r = Screen("mail \x1b[john.smith@example.com ok", config);
  EXPECT_EQ(r.text, "mail \x1b[<EMAIL_ADDRESS> ok");
}

// Found by review helper-52: a terminal's backspace and carriage return move back within the
// line, and what follows overwrites what was there, so a value can be shown whole that no
// reading of the bytes in order holds.
TEST(TextFoldTest, ATerminalsOverwritesAreReadAsItShowsThem) {
  constexpr auto kDrop = FoldedText::Controls::kDrop;
  EXPECT_EQ(FoldedText("AKIAIOSX\bFODNN7", kDrop).text(), "AKIAIOSFODNN7");
  EXPECT_EQ(FoldedText("abc\b\bX", kDrop).text(), "aXc");  // the cursor moves; nothing is erased
  EXPECT_EQ(FoldedText("\b\bab", kDrop).text(), "ab");     // not past the line's start
  EXPECT_EQ(FoldedText("one\n??O\rAK", kDrop).text(), "one\nAKO");
  EXPECT_EQ(FoldedText("a\r\nb\rc", kDrop).text(), "a\r\nc");  // a line ends with CR LF
  EXPECT_EQ(FoldedText("é\bx", kDrop).text(), "x");            // back over a whole character
  // A tab over what a line shows moves to the next stop without writing; past the line's end its
  // cells show blank (found by review helper-68).
  EXPECT_EQ(FoldedText("AKIAIOSF000000000000\r\tODNN7EXAMPLE", kDrop).text(),
            "AKIAIOSFODNN7EXAMPLE");
  EXPECT_EQ(FoldedText("abcdefghij\rxy\tZ", kDrop).text(), "xycdefghZj");
  EXPECT_EQ(FoldedText("xy\r\tz", kDrop).text(), "xy z");
  // The column a tab starts from follows characters of several bytes, backspaces, and an
  // overwrite too far from the line's end, which is read as appended.
  EXPECT_EQ(FoldedText("\u20ac\u20ac\b\tZ", kDrop).text(), "\u20ac\u20ac Z");
  EXPECT_EQ(FoldedText(std::string(300, 'x') + "\r\u20ac\b\tZ", kDrop).text(),
            std::string(300, 'x') + "\u20ac Z");
  const FoldedText over("????????ODNN7EXAMPLE\rAKIAIOSF", kDrop);
  EXPECT_EQ(over.text(), "AKIAIOSFODNN7EXAMPLE");
  // The original range of what was overwritten holds both the value's parts.
  EXPECT_EQ(over.Span(0, 20), (std::pair<size_t, size_t>{8, 29}));

  for (const std::string& text :
       {"k AKIAIOSX\bFODNN7EXAMPLE"s, "????????ODNN7EXAMPLE\rAKIAIOSF"s,
        "AKIAIOSF000000000000\r\tODNN7EXAMPLE"s, "card 4111 1111 1111 11XX\b\b11"s,
        "ssn 000-00-1120\r\x1b[Cssn 078-05"s}) {
    const std::vector<Finding> found = Recognize(text, RecognizerOptions{});
    ASSERT_EQ(found.size(), 1u) << text;
    const std::string redacted = RedactAll(text);
    EXPECT_EQ(redacted.find("AKIA"), std::string::npos) << redacted;
    EXPECT_EQ(redacted.find("1111"), std::string::npos) << redacted;
    EXPECT_EQ(redacted.find("1120"), std::string::npos) << redacted;
  }
  // Linear in the text's length: a long line overwritten from its start, character by
  // character, with characters of another length.
  std::string long_line(1 << 20, 'a');
  long_line += '\r';
  for (int i = 0; i < (1 << 18); ++i) long_line += "é";
  const absl::Time start = absl::Now();
  (void)Recognize(long_line, RecognizerOptions{});
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

// A tab's column is kept as the cursor moves, not counted again from the line's start (found on
// reading the change again: 1 MB on one line, a carriage return and 200,000 tabs took 21 s to
// fold, a request or an answer of that size held a loop that long).
TEST(TextFoldTest, ManyTabsOverALongLineLandWhereATerminalPutsThem) {
  const std::string line(1 << 20, 'x');
  std::string want = line;
  want[800'000] = 'Y';
  const absl::Time start = absl::Now();
  EXPECT_EQ(FoldedText(line + "\r" + std::string(100'000, '\t') + "Y", FoldedText::Controls::kDrop)
                .text(),
            want);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

}  // namespace
}  // namespace pillar::guard
