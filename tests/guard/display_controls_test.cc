#include "guard/display_controls.h"

#include <gtest/gtest.h>
#include <toml++/toml.h>

#include <string>

#include "guard/guard_config.h"
#include "guard/screen.h"

namespace pillar::guard {
namespace {

using namespace std::string_literals;

TEST(DisplayControlsTest, TextWithoutThemIsNotCopied) {
  // Blanks, CRLF, accents, CJK, emoji, zero-width joiners and invalid UTF-8 are text.
  const std::string text = "olá\tmundo\r\n\v\f中文 👩\u200d💻 \xff\xc2";
  EXPECT_FALSE(HasDisplayControls(text));
  std::string storage;
  EXPECT_EQ(WithoutDisplayControls(text, storage).data(), text.data());
  EXPECT_TRUE(storage.empty());
}

TEST(DisplayControlsTest, EachKindGoesWholeAndTheRestStaysByteForByte) {
  struct Case {
    std::string text, shown;
  };
  const Case cases[] = {
      {"AKIAIOSFXX\b\bODNN7EXAMPLE", "AKIAIOSFXXODNN7EXAMPLE"},            // backspaces
      {"????????ODNN7EXAMPLE\rAKIAIOSF", "????????ODNN7EXAMPLEAKIAIOSF"},  // a lone CR
      {"a\r\nb\r", "a\r\nb"},                                          // CRLF stays, a last CR goes
      {"4111\x1b[0m1111\x1b[2D22", "4111111122"},                      // CSI sequences whole
      {"see \x1b]8;;http://x\x1b\\here\x1b]8;;\x1b\\.", "see here."},  // a hyperlink's OSC
      {"\x1b]0;title\a!", "!"},                                        // OSC ended by BEL
      {"x\x1b(By\x1b"
       "7z",
       "xyz"},                                // charset, two-byte escape
      {"nul\0bel\a del\x7f"s, "nulbel del"},  // invisible ASCII
      {"csi \u009b31m red", "csi 31m red"},   // C1: U+009B alone
      {"\u202eELPMAXE\u202c \u2066x\u2069 \u200ey\u200f \u061cz", "ELPMAXE x y z"},  // bidi
      {"cut \x1b[3", "cut [3"},  // a sequence cut at the end loses its ESC only
      // What the guard reads as nothing and a display may draw (review helper-72): a soft
      // hyphen, Hangul fillers, Khmer inherent vowels, the Mongolian vowel separator, U+FFF0,
      // a shorthand format control.
      {"id XX\u00adAKIA \u3164\u115f\u1160\uffa0\u17b4\u17b5\u180e\ufff0\ufff8\U0001bca0|",
       "id XXAKIA |"},
      // And what a terminal shows nothing for (review helper-73): the ASCII separators, the
      // interlinear annotation marks, the Egyptian hieroglyph format controls.
      {"AKIAIOSF\x1c\x1d\x1e\x1fODNN7EXAMPLE \ufff9\ufffa\ufffb\U00013430\U0001343f.",
       "AKIAIOSFODNN7EXAMPLE ."},
      {"\x1b", ""},
  };
  for (const Case& c : cases) {
    EXPECT_TRUE(HasDisplayControls(c.text)) << c.text;
    EXPECT_EQ(WithoutDisplayControls(c.text), c.shown) << c.text;
    EXPECT_FALSE(HasDisplayControls(c.shown)) << c.shown;
  }
  // Look-alikes of the bidirectional controls' bytes are kept: U+2069's neighbours, U+202F (a
  // narrow no-break space), U+0100, and a lone lead byte at the end.
  for (const std::string& text :
       {"\u206a\u2065\u202f\u0100\u00a0\u00ac\u3165\ufffc\u180d"s, "x\xe2\x80"s, "\xd8"s,
        "\xef\xbf"s, "\xf0\x9b\xb2"s, "\xc2\xad"s.substr(0, 1)}) {
    EXPECT_FALSE(HasDisplayControls(text)) << text;
  }
}

// Found by fuzz_guard: in invalid UTF-8, a lead byte cut short before a removed control would
// have joined what follows it into a new character, and that one a display control.
TEST(DisplayControlsTest, ARemovalJoinsNoNewCharacter) {
  EXPECT_EQ(WithoutDisplayControls("\xc2\x1a\x9a["), "\x9a[");
  EXPECT_EQ(WithoutDisplayControls("\x16\xc2\xc2\x16\xad"), "\xad");
  EXPECT_EQ(WithoutDisplayControls("\xe2\x80\x07\xae!"), "\xae!");
  // A whole character before a removal stays.
  EXPECT_EQ(WithoutDisplayControls("\xc3\xa9\x07\x80"), "\xc3\xa9\x80");
}

TEST(DisplayControlsTest, WhatATerminalWouldJoinIsScreenedJoined) {
  // Without the controls, the card a terminal shows is the text's own, and found.
  const GuardConfig config;
  const std::string text = WithoutDisplayControls("pay 4111\x1b[0m 1111\x1b[1m 1111 1111");
  const ScreenResult r = Screen(text, config);
  ASSERT_EQ(r.findings.size(), 1u) << text;
  EXPECT_EQ(r.findings[0].finding.type, EntityType::kCreditCard);
  // And a terminal cannot show anything but the text in order: a wide character and backspaces,
  // which a terminal and the guard's terminal reading count differently (review helper-68),
  // leave the text as it is written.
  EXPECT_EQ(WithoutDisplayControls("AKIAIOSF中\b\bODNN7EXAMPLE"), "AKIAIOSF中ODNN7EXAMPLE");
}

TEST(DisplayControlsTest, TheConfigurationStripsByDefaultAndKeepsWhenAsked) {
  auto parse = [](std::string_view text) {
    toml::table table = toml::parse(text);
    return ParseGuardConfig(table["guard"].as_table(), "test.toml", "/");
  };
  absl::StatusOr<GuardConfig> config = parse("[guard]\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->strip_answer_controls);
  config = parse("[guard]\nanswer_controls = \"keep\"\n[guard.models.m]\nprompts = false\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->strip_answer_controls);
  EXPECT_FALSE(config->For("m", "").strip_answer_controls);  // inherited
  config = parse("[guard]\n[guard.models.m]\nanswer_controls = \"keep\"\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->strip_answer_controls);
  EXPECT_FALSE(config->For("m", "").strip_answer_controls);
  config = parse("[guard]\nanswer_controls = \"drop\"\n");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("answer_controls"), std::string::npos);
}

}  // namespace
}  // namespace pillar::guard
