#include "stages/whole_answer.h"

#include <gtest/gtest.h>

#include <string>

namespace pillar::stages {
namespace {

std::string Answer(const std::string& message) {
  return R"({"id":"c","object":"chat.completion","choices":[{"index":0,"message":)" + message +
         R"(,"finish_reason":"stop"}]})";
}

std::string Across(const std::string& body) {
  const guard::GuardConfig config;
  absl::StatusOr<std::string> why = AcrossTexts(body, config);
  return why.ok() ? *why : std::string(why.status().message());
}

// Found by review helper-81: a whole answer was read in fewer orders than a streamed one.
TEST(WholeAnswerTest, ToolCallsAreReadWithTheirNamesWhateverTheMembersOrder) {
  // Content, a refusal a tool-calling interface hides, a call's name and arguments.
  EXPECT_EQ(Across(Answer(R"({"role":"assistant","content":"the key is AKIAIO","refusal":"no",
      "tool_calls":[{"id":"t1","type":"function","function":{"name":"SFODNN7E",
      "arguments":"XAMPLE ok"}}]})")),
            "SECRET across the texts of the answer");
  // Arguments written before the name: a client shows the name first.
  EXPECT_EQ(Across(Answer(R"({"role":"assistant","tool_calls":[
      {"id":"t1","type":"function","function":{"arguments":"the key is AKIAIOSF","name":"f"}},
      {"id":"t2","type":"function","function":{"arguments":"{}","name":"ODNN7EXAMPLE"}}]})")),
            "SECRET across the texts of the answer");
  // A kind a client may show above the answer, with members after its text.
  EXPECT_EQ(Across(Answer(R"({"role":"assistant","content":"ODNN7EXAMPLE is the rest.",
      "reasoning_details":[{"type":"reasoning.text","text":"the key is AKIAIOSF",
      "signature":null,"format":"anthropic-claude-v1","index":0}]})")),
            "SECRET across the texts of the answer");
  // A number where a client prints text.
  EXPECT_EQ(
      Across(Answer(R"({"role":"assistant","content":"card 4111 1111 1111 ","refusal":1111})")),
      "CREDIT_CARD across the texts of the answer");
}

TEST(WholeAnswerTest, ACleanAnswerWithToolCallsPasses) {
  EXPECT_EQ(Across(Answer(R"({"role":"assistant","content":"Let me check both cities.",
      "tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather",
      "arguments":"{\"city\":\"Lisbon\"}"}},{"id":"call_2","type":"function","function":{
      "name":"get_weather","arguments":"{\"city\":\"Porto\"}"}}]})")),
            "");
}

// Found by review helper-84: a number in content or arguments that a client parses reads as
// JavaScript prints it.
TEST(WholeAnswerTest, ParsedJsonIsReadAsAClientReadsIt) {
  const guard::GuardConfig config;
  EXPECT_EQ(ParsedFinding(R"({"card":4.111111111111111e15})", config), "CREDIT_CARD");
  EXPECT_EQ(ParsedFinding(R"([{"n":5.555555555554444E15}])", config), "CREDIT_CARD");
  EXPECT_EQ(ParsedFinding(R"({"city":"Lisbon","days":3,"temp":21.5})", config), "");
  EXPECT_EQ(ParsedFinding("not json 4.111111111111111e15", config), "");
}

// Found by review helper-85: a raw copy, redacted, stood for an escaped or parsed value; a text a
// strict parser refuses, or deeper than 64 levels; a fraction; JSON in a string of JSON.
TEST(WholeAnswerTest, ParsedJsonIsReadWhateverAStrictParserSays) {
  const guard::GuardConfig config;
  EXPECT_EQ(ParsedFinding(R"({"a":"4111111111111111","b":4.111111111111111e15})", config),
            "CREDIT_CARD");
  EXPECT_EQ(
      ParsedFinding(R"({"z":123456789012345678901234567890,"card":4.111111111111111e15})", config),
      "CREDIT_CARD");
  EXPECT_EQ(ParsedFinding(R"({"z":NaN,"card":4.111111111111111e15})", config), "CREDIT_CARD");
  EXPECT_EQ(ParsedFinding(R"({"card":4.1111111111111115e15})", config), "CREDIT_CARD");
  EXPECT_EQ(ParsedFinding(R"({"payload":"{\"card\":4.111111111111111e15}"})", config),
            "CREDIT_CARD");
  std::string deep = R"({"a":)";
  for (int i = 0; i < 70; ++i) deep += "[";
  deep += "4.111111111111111e15";
  for (int i = 0; i < 70; ++i) deep += "]";
  deep += "}";
  EXPECT_EQ(ParsedFinding(deep, config), "CREDIT_CARD");
  EXPECT_EQ(ParsedFinding(R"({"price":19.99,"lat":38.7223,"id":12345})", config), "");
  // Review helper-86: a raw copy an escape lengthens; JSON in a string beside NaN; values of a
  // list that read as a card only when joined across lines.
  EXPECT_EQ(ParsedFinding(R"({"a":"4111111111111111\u0035","b":4.111111111111111e15})", config),
            "CREDIT_CARD");
  EXPECT_EQ(ParsedFinding(R"({"z":NaN,"p":"{\"card\":4.111111111111111e15}"})", config),
            "CREDIT_CARD");
  EXPECT_EQ(ParsedFinding(R"({"monthly_budget":[4500,1250,3000,2200]})", config), "");
  EXPECT_EQ(ParsedFinding(R"(["4111","1111","1111","1111"])", config), "");
}

// Found by review helper-87: a display control spelled with an escape comes back in what a client
// parses (strip mode took it out of the text as written only); a strict parser's refusal left a
// string's copy of a card uncounted beside the same card written as a number.
TEST(WholeAnswerTest, ParsedJsonHoldsNoDisplayControlAndCountsEveryString) {
  guard::GuardConfig config;
  EXPECT_EQ(ParsedFinding(R"({"k":"XX\u00adAKIAIOSFODNN7EXAMPLE"})", config), kDisplayControl);
  EXPECT_EQ(ParsedFinding(R"({"k":"\u202eELPMAXE7NNDOFSOIAIKA"})", config), kDisplayControl);
  EXPECT_EQ(ParsedFinding(R"({"k":"AKIAIOSFODNN7EXAMPL1\u001b[1DE"})", config), kDisplayControl);
  EXPECT_EQ(ParsedFinding(R"({"k":"id\u31644111111111111111"})", config), kDisplayControl);
  EXPECT_EQ(DecodedFinding(R"({"k":"XX\u00adAKIAIOSFODNN7EXAMPLE"})", config),
            "a display control spelled with a JSON escape");
  // JSON with escapes that print: a regex's \\b, a line feed, a tab, quotes, non-ASCII text.
  EXPECT_EQ(DecodedFinding(R"({"pattern":"\\bfoo\\b","note":"a\nb\tc","q":"\"x\"","w":"\u00e9"})",
                           config),
            "");
  config.strip_answer_controls = false;  // "keep": controls are read as guard.md says
  EXPECT_EQ(ParsedFinding(R"({"k":"\u202eELPMAXE7NNDOFSOIAIKA"})", config), "");
  config.strip_answer_controls = true;
  EXPECT_EQ(ParsedFinding(R"({"a":"4111111111111111","n":4.111111111111111e15,)"
                          R"("big":123456789012345678901234567890})",
                          config),
            "CREDIT_CARD");
  EXPECT_EQ(
      ParsedFinding(R"({"a":"4111111111111111","s":"\ud800","n":4.111111111111111e15})", config),
      "CREDIT_CARD");
  EXPECT_EQ(ParsedFinding(R"({"a":"card 4111111111111111","big":123456789012345678901234567890})",
                          config),
            "");
}

// Found by review helper-88: a bare JSON number or string, whole, is parsed by clients as an
// object is; and texts with escapes of layout controls lose them rather than being refused
// (an Arabic text's right-to-left mark, a German word's soft hyphens, Fluent's isolates), while
// escapes the guard's readings model (a regex's \b, a lone \r) are no reason for a refusal.
TEST(WholeAnswerTest, BareJsonIsParsedAndEscapedDisplayControlsGo) {
  const guard::GuardConfig config;
  EXPECT_EQ(ParsedFinding("4.111111111111111e15", config), "CREDIT_CARD");
  EXPECT_EQ(ParsedFinding(" 4111111111111111e0 ", config), "CREDIT_CARD");
  EXPECT_EQ(ParsedFinding(R"("\u202eELPMAXE7NNDOFSOIAIKA")", config), kDisplayControl);
  EXPECT_EQ(ParsedFinding("42", config), "");
  EXPECT_EQ(ParsedFinding("3 ways to say 4.111111111111111e15", config), "");  // prose
  std::string storage;
  EXPECT_EQ(ShownParsed(R"("\u202eELPMAXE7NNDOFSOIAIKA")", storage, config),
            R"("ELPMAXE7NNDOFSOIAIKA")");
  EXPECT_EQ(ShownParsed(R"(not JSON: \u202e)", storage, config), R"(not JSON: \u202e)");
  // A Markdown link or a citation opens no list; a list of values does.
  EXPECT_EQ(ShownParsed(R"([Regex] Use \bcat\b)", storage, config), R"([Regex] Use \bcat\b)");
  EXPECT_EQ(ShownParsed(R"([ "\u202e", 1])", storage, config), R"([ "", 1])");
  EXPECT_FALSE(OpensJson("[see the docs](https://example.org)").value_or(true));
  EXPECT_FALSE(OpensJson("[").has_value());
  // Review helper-91: as lenient clients read it, a list of literals and blanks of other kinds.
  for (std::string_view opens : {"[null,1]", "[ true", "[false]", "[NaN]", "[Infinity]",
                                 "\f{\"k\":1}", "\v[1]", "\u00a0{", "\ufeff\"x\"", "\u2028[1]"}) {
    EXPECT_TRUE(OpensJson(opens).value_or(false)) << opens;
  }
  EXPECT_FALSE(OpensJson("[nu").has_value());
  EXPECT_FALSE(OpensJson("[note] see").value_or(true));
  EXPECT_FALSE(OpensJson("[Nah").value_or(true));
  for (std::string_view answer : {R"({"text":"\u0627\u0644\u0633\u0639\u0631 \u200f100"})",
                                  R"({"title":"Donau\u00addampf\u00adschiff\u00adfahrt"})",
                                  R"({"msg":"Hello, \u2068Alice\u2069!"})"}) {
    const std::string_view shown = ShownParsed(answer, storage, config);
    EXPECT_LT(shown.size(), answer.size()) << answer;
    EXPECT_EQ(DecodedFinding(shown, config), "") << answer;
  }
  for (std::string_view answer :
       {R"([Regex] Use \bcat\b to match "cat": re.findall(r"\bcat\b", s).)",
        R"({"command":"printf \"50%\r100%\n\""})", R"([Note] old Macs end a line with "\r".)"}) {
    EXPECT_EQ(DecodedFinding(ShownParsed(answer, storage, config), config), "") << answer;
  }
}

}  // namespace
}  // namespace pillar::stages
