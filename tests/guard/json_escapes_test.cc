#include "guard/json_escapes.h"

#include <gtest/gtest.h>

namespace pillar::guard {
namespace {

TEST(JsonEscapesTest, EscapesAreDecodedAsAJsonReaderDecodesThem) {
  EXPECT_EQ(JsonDecoded(R"(AKIAIOSF\u004fDNN7EXAMPLE)"), "AKIAIOSFODNN7EXAMPLE");
  EXPECT_EQ(JsonDecoded(R"(bob\u0040example.com \"q\" a\/b \\u0041)"),
            "bob@example.com \"q\" a/b \\u0041");
  EXPECT_EQ(JsonDecoded(R"(\ud83d\ude00 \u00e9)"), "\xf0\x9f\x98\x80 \xc3\xa9");
  // A lone surrogate reads as a blank (its hex digits would glue to what follows: review
  // helper-84); a cut escape and an unknown one are kept as written.
  EXPECT_EQ(JsonDecoded(R"(\ud83d x \u00 \q)"), R"(  x \u00 \q)");
  EXPECT_EQ(JsonDecoded(R"(\ud8004111)"), " 4111");
  EXPECT_EQ(JsonDecoded("no escapes"), "no escapes");
}

// Found by review helper-83: a value spelled with escapes reaches a client that parses the text
// (structured outputs, tool arguments) whole.
TEST(JsonEscapesTest, AValueSpelledWithEscapesIsFound) {
  const GuardConfig config;
  EXPECT_EQ(EscapedFinding(R"({"key": "AKIAIOSF\u004fDNN7EXAMPLE"})", config), "SECRET");
  EXPECT_EQ(EscapedFinding(R"({"card": "4111\u00201111\u00201111\u00201111"})", config),
            "CREDIT_CARD");
  EXPECT_EQ(EscapedFinding(R"({"mail": "bob\u0040example.com"})", config), "EMAIL_ADDRESS");
  // What the text shows as it is is not counted twice, nor are escapes that hide nothing.
  EXPECT_EQ(EscapedFinding(R"({"mail": "bob@example.com", "note": "caf\u00e9"})", config), "");
  EXPECT_EQ(EscapedFinding(R"({"html": "\u003cb\u003e"})", config), "");
}

// Found by review helper-84: a decoy the decoding breaks stood for the value it made (counts
// compared); a lone surrogate glued its digits to a card; JSON in a string of JSON.
TEST(JsonEscapesTest, DecoysSurrogatesAndNestedJsonDoNotHideAValue) {
  const GuardConfig config;
  EXPECT_EQ(EscapedFinding(R"({"note":"ab@cd.com\u002dx","mail":"bob\u0040example.com"})", config),
            "EMAIL_ADDRESS");
  EXPECT_EQ(EscapedFinding(R"({"card":"\ud8004111111111111111"})", config), "CREDIT_CARD");
  EXPECT_EQ(EscapedFinding(R"({"payload": "{\"k\":\"AKIAIOSF\\u004fDNN7EXAMPLE\"}"})", config),
            "SECRET");
  // A raw copy, redacted, does not stand for an escaped one the client decodes (review
  // helper-85).
  EXPECT_EQ(EscapedFinding(R"({"a":"4111111111111111","b":"\u0034111111111111111"})", config),
            "CREDIT_CARD");
  EXPECT_EQ(EscapedFinding(R"({"a":"bob@corp.io","b":"bob@corp.io\n"})", config), "");
  // A raw copy that an escape after it lengthens is no copy (review helper-86).
  EXPECT_EQ(EscapedFinding(R"({"a":"4111111111111111\u0035","b":"\u0034111111111111111"})", config),
            "CREDIT_CARD");
  EXPECT_EQ(EscapedFinding(R"({"a":"078-05-1120\u0035","b":"\u003078-05-1120"})", config),
            "US_SSN");
}

// Found by review helper-85: a tail counted in bytes let escapes of nothing push a value's start
// out of it.
TEST(JsonEscapesTest, ATailIsCountedAsADecodingReaderSeesIt) {
  std::string padded = "4111 ";
  for (int i = 0; i < 1400; ++i) padded += R"(\u200b)";
  padded += "1111";
  EXPECT_EQ(TailShowing(padded, 10), padded.size());     // all of it shows 9
  EXPECT_EQ(TailShowing(padded, 8), padded.size() - 1);  // "111 " and "1111"
  EXPECT_EQ(TailShowing("abcdef", 3), 3u);
  EXPECT_EQ(TailShowing(R"(x\u00e9\u00e9)", 2), 12u);  // an accented letter shows
}

// Found by review helper-89: a tail cut inside a run of backslashes began with the escape's
// second byte, and read the escape after the run as text.
TEST(JsonEscapesTest, ACutKeepsAnEscapeWhole) {
  EXPECT_EQ(UnescapedCut(R"(ab\ncd)", 3), 2u);  // 'n' is escaped: the cut keeps its backslash
  EXPECT_EQ(UnescapedCut(R"(ab\ncd)", 4), 4u);
  EXPECT_EQ(UnescapedCut(R"(a\\\\u0041)", 3), 3u);  // the second pair begins at 3
  EXPECT_EQ(UnescapedCut(R"(a\\\\u0041)", 4), 3u);
  EXPECT_EQ(UnescapedCut(R"(a\\\u0041)", 4), 3u);  // an odd run: 3 escapes the 'u' after
  EXPECT_EQ(UnescapedCut(R"(a\\\u0041)", 5), 5u);
  EXPECT_EQ(UnescapedCut("abc", 0), 0u);
  EXPECT_EQ(UnescapedCut(R"(\\\)", 3), 2u);  // at the end: a lone backslash goes with what follows
  EXPECT_EQ(UnescapedCut(R"(\\\n)", 3), 2u);
}

TEST(JsonEscapesTest, BackslashesBeforeCountsTheRunOnly) {
  EXPECT_EQ(BackslashesBefore(R"(a\\\n)", 4), 3u);
  EXPECT_EQ(BackslashesBefore(R"(a\\\n)", 2), 1u);
  EXPECT_EQ(BackslashesBefore(R"(a\\\n)", 1), 0u);
  EXPECT_EQ(BackslashesBefore(R"(\\)", 2), 2u);  // to the text's start
  EXPECT_EQ(BackslashesBefore(R"(\\)", 0), 0u);
}

TEST(JsonEscapesTest, EscapedFindingGivesTheTextDecodedOnce) {
  GuardConfig config;
  std::string decoded;
  EXPECT_EQ(EscapedFinding(R"({"a":"x\u0041\\u0042"})", config, &decoded), "");
  EXPECT_EQ(decoded, R"({"a":"xA\u0042"})");  // one level, not the second
  EXPECT_EQ(EscapedFinding("plain", config, &decoded), "");
  EXPECT_EQ(decoded, "plain");
  EXPECT_EQ(EscapedFinding(R"({"mail": "bob\u0040example.com"})", config, &decoded),
            "EMAIL_ADDRESS");
  EXPECT_EQ(decoded, R"({"mail": "bob@example.com"})");
}

// Found by review helper-88: an escaped tag character (two code units) counted as two, an
// escaped combining mark past U+036F as one, so that 512 of them pushed a card's start out.
TEST(JsonEscapesTest, ATailCountsForNothingWhatTheFoldingDrops) {
  std::string tags = "4";
  for (int i = 0; i < 700; ++i) tags += R"(\udb40\udc20)";
  tags += "111 1111";
  EXPECT_EQ(TailShowing(tags, 9), tags.size());  // all of it shows 9
  std::string marks = "4";
  for (int i = 0; i < 1100; ++i) marks += R"(\u0489)";
  marks += "111";
  EXPECT_EQ(TailShowing(marks, 4), marks.size());
  // Written as UTF-8, not escaped, alike.
  std::string raw = "4";
  for (int i = 0; i < 100; ++i) raw += "\u200b";
  raw += "111";
  EXPECT_EQ(TailShowing(raw, 4), raw.size());
  EXPECT_EQ(TailShowing(R"(ab\ud83d\ude00)", 1), 12u);  // an emoji shows, as one
}

// Found by reviews helper-87 and helper-88: what strip mode does to layout controls, done to
// their escapes in a text clients parse; nothing else changes.
TEST(JsonEscapesTest, EscapesOfLayoutControlsGo) {
  std::string storage;
  EXPECT_EQ(WithoutEscapedDisplayControls(R"({"k":"XX\u00ADAKIA"})", storage), R"({"k":"XXAKIA"})");
  EXPECT_EQ(WithoutEscapedDisplayControls(R"("\u202eELPM")", storage), R"("ELPM")");
  EXPECT_EQ(WithoutEscapedDisplayControls(R"(L1\u001b[1DE)", storage), "L1[1DE");  // ESC alone
  EXPECT_EQ(WithoutEscapedDisplayControls(R"(a\u200fb\u2068c\u2069d\u009be)", storage), "abcde");
  // An escaped backslash before "u202e" is text, not an escape; nor is what starts escaped.
  EXPECT_EQ(WithoutEscapedDisplayControls(R"(\\u202e)", storage), R"(\\u202e)");
  EXPECT_EQ(WithoutEscapedDisplayControls(R"(\u202e)", storage, /*starts_escaped=*/true),
            R"(\u202e)");
  // Review helper-89: a removal right after a "\u" that is no escape leaves a blank, not a new
  // escape made of the two.
  EXPECT_EQ(WithoutEscapedDisplayControls(R"(L1\u00\u200e1b[1DE)", storage), R"(L1\u00 1b[1DE)");
  EXPECT_EQ(WithoutEscapedDisplayControls(R"(\u\u200e00AD)", storage), R"(\u 00AD)");
  EXPECT_EQ(WithoutEscapedDisplayControls(R"(\u00 \u200eAD)", storage), R"(\u00 AD)");
  // Lone high surrogates go, so that no removal pairs two into a layout control (U+13430); a
  // lone low one stays (in a stream's middle, it may be a pair's second half).
  EXPECT_EQ(WithoutEscapedDisplayControls(R"(a\ud80d\u202e\udc30b)", storage), R"(a\udc30b)");
  EXPECT_EQ(WithoutEscapedDisplayControls(R"(a\udc30b\ud80d)", storage), R"(a\udc30b)");
  // In a stream, a high surrogate at the end waits for its low half.
  EXPECT_EQ(WithoutEscapedDisplayControls(R"(a\ud83d)", storage, false, /*ends_open=*/true),
            R"(a\ud83d)");
  EXPECT_EQ(WithoutEscapedDisplayControls(R"(a\ud83d\ude)", storage, false, /*ends_open=*/true),
            R"(a\ud83d\ude)");
  // Review helper-90: the controls a terminal moves back with, and those that print as nothing,
  // go as strip mode takes them out of a text as written: a backspace, a carriage return that
  // ends no line, NUL, the unit separator.
  EXPECT_EQ(WithoutEscapedDisplayControls(R"(????????ODNN7EXAMPLE\rAKIAIOSF)", storage),
            "????????ODNN7EXAMPLEAKIAIOSF");
  EXPECT_EQ(WithoutEscapedDisplayControls(R"(a\bb\u0008c\u000dd\u0000e\u001ff)", storage),
            "abcdef");
  // In a stream, a carriage return with less than an escape after it waits for what comes.
  EXPECT_EQ(WithoutEscapedDisplayControls(R"(a\r\u000)", storage, false, /*ends_open=*/true),
            R"(a\r\u000)");
  // What a reader shows stays: letters, blanks (a tab, a line feed, CRLF, a form feed), quotes,
  // an emoji's surrogate pair, a zero-width space, a cut escape.
  for (std::string_view kept : {R"(\u0041\n\t\r\n\f\u000b\"\\)", R"(a\u000d\u000ab)",
                                R"(\ud83d\ude00\u200b)", R"(abc\u20)", "plain"}) {
    EXPECT_EQ(WithoutEscapedDisplayControls(kept, storage), kept);
  }
}

}  // namespace
}  // namespace pillar::guard
