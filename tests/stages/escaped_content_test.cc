#include "stages/escaped_content.h"

#include <gtest/gtest.h>

#include <string>

namespace pillar::stages {
namespace {

// Reviews helper-87 to helper-92: a streamed JSON content loses the escapes of display
// controls as its chunks come, whatever the chunks cut.
TEST(EscapedContentTest, EscapesOfDisplayControlsGoWhateverTheChunksCut) {
  const guard::GuardConfig config;
  const std::string text = R"({"k":"XX\u00adAKIA","e":"\ud83d\ude00","r":"a\rb\r\nc"})";
  for (size_t size = 1; size <= 13; ++size) {
    EscapedContent escaped;
    std::string held;
    for (size_t at = 0; at < text.size(); at += size) {
      const size_t appended_at = held.size();
      held += text.substr(at, size);
      escaped.TakeDisplayControls(held, appended_at, at + size >= text.size(), config);
    }
    EXPECT_EQ(held, R"({"k":"XXAKIA","e":"\ud83d\ude00","r":"ab\r\nc"})") << size;
  }
  // Prose is not rewritten.
  EscapedContent prose;
  std::string held = R"([Note] \u202e is an override)";
  prose.TakeDisplayControls(held, 0, true, config);
  EXPECT_EQ(held, R"([Note] \u202e is an override)");
}

// A value spelled with escapes whose start went out is read with it (review helper-87); a tail
// that takes more than 64 KiB to show its reach is padding (review helper-85).
TEST(EscapedContentTest, TheEndOfWhatWentOutIsReadAndBounded) {
  const guard::GuardConfig config;
  EscapedContent escaped;
  ASSERT_TRUE(escaped.Released(R"({"iban":"\u0044\u0045\u0038\u0039)", config));
  EXPECT_EQ(escaped.Finding(R"( 3704 0044 0532 0130 00"})", config),
            "IBAN_CODE spelled with JSON escapes");
  EXPECT_EQ(escaped.Finding(R"( and more words"})", config), "");
  EscapedContent padded;
  std::string pad;
  for (int i = 0; i < 12000; ++i) pad += R"(\u200b)";
  EXPECT_FALSE(padded.Released(pad, config));
  // A short held text after a long escaped tail waits for more.
  EscapedContent waiting;
  std::string tail;
  for (int i = 0; i < 1000; ++i) tail += R"(\u00e9)";
  ASSERT_TRUE(waiting.Released(tail, config));
  EXPECT_TRUE(waiting.Waits("ab"));
  EXPECT_FALSE(waiting.Waits(std::string(2000, 'a')));
}

}  // namespace
}  // namespace pillar::stages
