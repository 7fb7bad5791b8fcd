#include "stages/choice_joins.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pillar::stages {
namespace {

protocol::DeltaField Field(std::string key, std::string last = "") {
  protocol::DeltaField field;
  field.path.push_back({std::move(key), last.empty() ? -1 : 0});
  if (!last.empty()) {
    field.path.push_back({"function", -1});
    field.path.push_back({std::move(last), -1});
  }
  return field;
}

const protocol::DeltaField kReasoning = Field("reasoning_content");
const protocol::DeltaField kArguments = Field("tool_calls", "arguments");

TEST(ChoiceJoinsTest, AKeySplitBetweenKindsStopsTheCall) {
  const guard::GuardConfig config;
  ChoiceJoins joins(config);
  joins.ContentReleased(0, "ODNN7EXAMPLE ok");
  const ChoiceJoins::Verdict verdict = joins.Finished(0, {{kReasoning, "the key is AKIAIOSF"}});
  EXPECT_TRUE(absl::IsPermissionDenied(verdict.stop)) << verdict.stop;
  EXPECT_NE(verdict.stop.message().find("shows them kind by kind"), std::string::npos);
  ASSERT_FALSE(verdict.screen.findings.empty());  // counted and audited by the caller
  EXPECT_EQ(verdict.screen.findings[0].finding.type, guard::EntityType::kSecret);
}

TEST(ChoiceJoinsTest, CleanKindsPass) {
  const guard::GuardConfig config;
  ChoiceJoins joins(config);
  joins.ContentReleased(0, "the answer is 42");
  EXPECT_TRUE(joins.Finished(0, {{kReasoning, "I think "}, {kArguments, "{\"x\":1}"}}).ok());
  EXPECT_TRUE(joins.Shown(1, "hello", ChoiceJoins::kContent).ok());
  EXPECT_TRUE(joins.Shown(1, "world", 1).ok());
}

// Found by review helper-79 (F4): a JWT longer than the window, split between reasoning and
// content with more than the window on one side, was seen whole by no screen.
TEST(ChoiceJoinsTest, ARunLongerThanTheWindowAcrossKindsStopsTheCall) {
  const guard::GuardConfig config;
  const std::string run(ChoiceJoins::kWindow + 16 * 1024, 'x');
  {
    ChoiceJoins joins(config);  // the long side before the point
    joins.ContentReleased(0, "yz ok");
    const ChoiceJoins::Verdict verdict = joins.Finished(0, {{kReasoning, "token eyJ" + run}});
    EXPECT_EQ(verdict.stop.code(), absl::StatusCode::kUnavailable) << verdict.stop;
    EXPECT_NE(verdict.stop.message().find("a token longer than the 65536 bytes screened"),
              std::string::npos);
  }
  {
    ChoiceJoins joins(config);  // the long side after it: content released in pieces
    for (size_t i = 0; i < run.size(); i += 4096) {
      joins.ContentReleased(0, std::string_view(run).substr(i, 4096));
    }
    joins.ContentReleased(0, " ok");
    const ChoiceJoins::Verdict verdict = joins.Finished(0, {{kReasoning, "token eyJ"}});
    EXPECT_FALSE(verdict.ok());
    EXPECT_FALSE(absl::IsPermissionDenied(verdict.stop)) << verdict.stop;
  }
  {
    ChoiceJoins joins(config);  // content's long end, then arguments
    joins.ContentReleased(0, "see " + run);
    EXPECT_FALSE(joins.Finished(0, {{kArguments, "abc\"}"}}).ok());
  }
  // A long text with blanks, or a point between words, is screened as it is.
  {
    ChoiceJoins joins(config);
    std::string words;
    while (words.size() < 2 * ChoiceJoins::kWindow) words += "word ";
    joins.ContentReleased(0, words);
    EXPECT_TRUE(joins.Finished(0, {{kArguments, "{\"x\":1}"}}).ok());
    ChoiceJoins spaced(config);
    spaced.ContentReleased(0, " " + run + " ");
    EXPECT_TRUE(spaced.Finished(0, {{kReasoning, "token " + run + " "}}).ok());
  }
}

// As a client that prints texts as they come: the end shown (kShownTail bytes) and the next
// kind of text.
TEST(ChoiceJoinsTest, ShownTextsAreJoinedWhereTheKindChanges) {
  const guard::GuardConfig config;
  ChoiceJoins joins(config);
  EXPECT_TRUE(joins.Shown(0, "the key is AKIAIOSF", 1).ok());
  const ChoiceJoins::Verdict verdict = joins.Shown(0, "ODNN7EXAMPLE ok", ChoiceJoins::kContent);
  EXPECT_TRUE(absl::IsPermissionDenied(verdict.stop)) << verdict.stop;
  EXPECT_NE(verdict.stop.message().find("prints them as they come"), std::string::npos);
  // The same kind goes on: its own screen saw it (not joined again here).
  ChoiceJoins same(config);
  EXPECT_TRUE(same.Shown(0, "abc", ChoiceJoins::kContent).ok());
  EXPECT_TRUE(same.Shown(0, "def", ChoiceJoins::kContent).ok());
  // A token longer than the shown end across a change of kind is read as far as the end goes:
  // only the kinds' 64 KiB window refuses one (review helper-82: signatures and encrypted
  // reasoning were refused).
  ChoiceJoins long_run(config);
  EXPECT_TRUE(
      long_run.Shown(0, std::string(ChoiceJoins::kShownTail * 3, 'q'), ChoiceJoins::kContent).ok());
  EXPECT_TRUE(long_run.Shown(0, "qq", 1).ok());
}

// Found by review helper-80: a kind of text a client may show above the answer (OpenRouter's
// reasoning_details) was joined only after it; a number and a tool's name, which clients show
// as text, were joined with nothing; a naming word after a number, in the next text, was not
// counted.
TEST(ChoiceJoinsTest, EveryKindIsJoinedBeforeAndAfterTheOthers) {
  const guard::GuardConfig config;
  protocol::DeltaField details;
  details.path = {{"reasoning_details", 0}, {"text", -1}};
  ChoiceJoins joins(config);
  joins.ContentReleased(0, "ODNN7EXAMPLE is the rest of it.");
  EXPECT_TRUE(absl::IsPermissionDenied(joins.Finished(0, {{details, "the key is AKIAIOSF"}}).stop));
}

TEST(ChoiceJoinsTest, NumbersAndNamesAreTextsOfTheChoice) {
  const guard::GuardConfig config;
  protocol::DeltaField refusal = Field("refusal");
  refusal.structural = refusal.number = true;
  {
    ChoiceJoins joins(config);  // a card's last group as a number, after the content
    joins.ContentReleased(0, "card 4111 1111 1111 ");
    EXPECT_TRUE(joins.Structural(0, refusal, "1111").ok());
    EXPECT_TRUE(absl::IsPermissionDenied(joins.Finished(0, {}).stop));
  }
  {
    ChoiceJoins joins(config);  // shown as it comes: stopped before it goes out
    EXPECT_TRUE(joins.Shown(0, "card 4111 1111 1111 ", ChoiceJoins::kContent).ok());
    EXPECT_TRUE(absl::IsPermissionDenied(joins.Structural(0, refusal, "1111").stop));
  }
  protocol::DeltaField name = Field("tool_calls", "name");
  name.structural = true;
  {
    ChoiceJoins joins(config);
    joins.ContentReleased(0, "the key is AKIAIOSF");
    EXPECT_TRUE(joins.Structural(0, name, "ODNN7EXAMPLE").ok());
    EXPECT_FALSE(joins.Finished(0, {}).ok());
  }
  {
    ChoiceJoins joins(config);  // roles and types are the API's words, not the model's
    protocol::DeltaField role = Field("role");
    role.structural = true;
    joins.ContentReleased(0, "hello");
    EXPECT_TRUE(joins.Structural(0, role, "assistant").ok());
    EXPECT_TRUE(joins.Structural(0, name, "get_weather").ok());
    EXPECT_TRUE(joins.Finished(0, {{kArguments, "{\"city\":\"Lisbon\"}"}}).ok());
  }
}

TEST(ChoiceJoinsTest, ANamingWordInTheNextTextCounts) {
  const guard::GuardConfig config;
  ChoiceJoins joins(config);
  joins.ContentReleased(0, "reach me at 4155552671");
  const ChoiceJoins::Verdict verdict =
      joins.Finished(0, {{Field("refusal"), " is my phone, call me"}});
  EXPECT_TRUE(absl::IsPermissionDenied(verdict.stop)) << verdict.stop;
  // A value the earlier text had alone (and redacted) is not one the join made.
  ChoiceJoins clean(config);
  clean.ContentReleased(0, "write to <EMAIL_ADDRESS>");
  EXPECT_TRUE(clean.Finished(0, {{Field("refusal"), " today"}}).ok());
}

// Found by review helper-80: a thousand held texts each joined to the end shown cost 2.5 s of
// CPU per MB; they are joined once, all together, and a value across two of them is seen.
TEST(ChoiceJoinsTest, HeldTextsAreShownTogether) {
  const guard::GuardConfig config;
  ChoiceJoins joins(config);
  std::string words;
  while (words.size() < 30000) words += "1.1.1.1 order ";
  EXPECT_TRUE(joins.Shown(0, words, ChoiceJoins::kContent).ok());
  std::vector<std::string> texts(1000, " w");
  texts[500] = " key AKIAIOSF";
  texts[501] = "ODNN7EXAMPLE ";
  std::vector<ChoiceJoins::ShownText> shown;
  for (size_t i = 0; i < texts.size(); ++i) shown.push_back({texts[i], int(i) + 1});
  EXPECT_TRUE(absl::IsPermissionDenied(joins.Shown(0, shown).stop));
}

// Two calls' arguments hold a key's halves, each call named between them: read as arguments
// alone, and call by call with their names.
TEST(ChoiceJoinsTest, ToolCallsAreReadAloneAndWithTheirNames) {
  const guard::GuardConfig config;
  ChoiceJoins joins(config);
  auto at = [](int64_t call, const char* key) {
    protocol::DeltaField f;
    f.path = {{"tool_calls", call}, {"function", -1}, {key, -1}};
    return f;
  };
  protocol::DeltaField id;
  id.path = {{"tool_calls", 0}, {"id", -1}};
  id.structural = true;
  protocol::DeltaField name0 = at(0, "name"), name1 = at(1, "name");
  name0.structural = name1.structural = true;
  EXPECT_TRUE(joins.Structural(0, id, "t0").ok());
  EXPECT_TRUE(joins.Structural(0, name0, "store").ok());
  EXPECT_TRUE(joins.Structural(0, name1, "store").ok());
  const auto v = joins.Finished(
      0, {{at(0, "arguments"), "the key is AKIAIOSF"}, {at(1, "arguments"), "ODNN7EXAMPLE ok"}});
  EXPECT_FALSE(v.ok());
}

// Found by review helper-81: runs without blanks that are no token (a tool call's compact JSON
// arguments, a minified JSON in the content) were refused where they met another text.
TEST(ChoiceJoinsTest, LongJsonWithoutBlanksIsNoToken) {
  const guard::GuardConfig config;
  std::string json = "{\"values\":[0";
  for (int i = 1; json.size() < 80 * 1024; ++i) json += "," + std::to_string(7 * i);
  json += "]}";
  ChoiceJoins joins(config);
  EXPECT_TRUE(joins.Shown(0, "I'll plot these values for you.", ChoiceJoins::kContent).ok());
  EXPECT_TRUE(joins.Shown(0, std::vector<ChoiceJoins::ShownText>{{json, 1}}).ok());
  EXPECT_TRUE(joins.Shown(0, "Done.", ChoiceJoins::kContent).ok());
  joins.ContentReleased(0, json + " is the data");
  protocol::DeltaField id;
  id.path = {{"tool_calls", 0}, {"id", -1}};
  id.structural = true;
  EXPECT_TRUE(joins.Structural(0, id, "call_1").ok());
  EXPECT_TRUE(joins.Finished(0, {{kArguments, json}, {kReasoning, "let me see"}}).ok());
}

// Found by review helper-81: the rest read as one text (OpenRouter's reasoning_details with an
// id and a format after its text), values in three texts with a hidden one between, two
// structural members in a row, and whole answers read in fewer orders than streams.
TEST(ChoiceJoinsTest, EachOfTheRestsTextsIsJoinedOnItsOwn) {
  const guard::GuardConfig config;
  protocol::DeltaField text, format, id;
  text.path = {{"reasoning_details", 0}, {"text", -1}};
  format.path = {{"reasoning_details", 0}, {"format", -1}};
  id.path = {{"reasoning_details", 0}, {"id", -1}};
  id.structural = true;
  ChoiceJoins joins(config);
  EXPECT_TRUE(joins.Structural(0, id, "rs_1").ok());
  joins.ContentReleased(0, "ODNN7EXAMPLE is the rest.");
  const ChoiceJoins::Verdict verdict =
      joins.Finished(0, {{text, "the key is AKIAIOSF"}, {format, "openai-responses-v1"}});
  EXPECT_TRUE(absl::IsPermissionDenied(verdict.stop)) << verdict.stop;
}

TEST(ChoiceJoinsTest, AValueInThreeTextsIsSeenWhicheverIsHiddenBetween) {
  const guard::GuardConfig config;
  {
    ChoiceJoins joins(config);
    joins.ContentReleased(0, " 1111 ");
    EXPECT_FALSE(joins
                     .Finished(0, {{kReasoning, "my card is 4111 1111"},
                                   {Field("refusal"), "no"},
                                   {kArguments, "1111 thanks"}})
                     .ok());
  }
  {
    ChoiceJoins joins(config);
    joins.ContentReleased(0, "SFODNN7E");
    EXPECT_FALSE(joins
                     .Finished(0, {{kReasoning, "the key is AKIAIO"},
                                   {Field("refusal"), "no"},
                                   {kArguments, "XAMPLE ok"}})
                     .ok());
  }
  ChoiceJoins clean(config);
  clean.ContentReleased(0, "Here is the plan.");
  EXPECT_TRUE(clean
                  .Finished(0, {{kReasoning, "Think first."},
                                {Field("refusal"), "no"},
                                {kArguments, "{\"step\":1}"}})
                  .ok());
}

TEST(ChoiceJoinsTest, StructuralMembersInARowAreJoined) {
  const guard::GuardConfig config;
  ChoiceJoins joins(config);
  EXPECT_TRUE(joins.Shown(0, "ok ", ChoiceJoins::kContent).ok());
  ChoiceJoins::Verdict last;
  for (const char* key : {"x_zz", "refusal", "reasoning", "reasoning_content"}) {
    protocol::DeltaField number = Field(key);
    number.structural = number.number = true;
    last = joins.Structural(0, number, std::string(key) == "x_zz" ? "4111" : "1111");
    if (!last.ok()) break;
  }
  EXPECT_TRUE(absl::IsPermissionDenied(last.stop)) << last.stop;
}

// Found by review helper-82: a JWT in three texts whose middle is longer than the old 64 bytes,
// a key in four reasoning_details elements' texts (a client joins every element's text), and
// false refusals of signatures and encrypted reasoning longer than a piece's window.
TEST(ChoiceJoinsTest, AJwtInThreeKindsIsSeen) {
  const guard::GuardConfig config;
  ChoiceJoins joins(config);
  joins.ContentReleased(0,
                        "dWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ");
  const ChoiceJoins::Verdict verdict = joins.Finished(
      0, {{kReasoning, "the session token is eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJz"},
          {Field("reasoning"), " "},
          {kArguments, ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"}});
  EXPECT_TRUE(absl::IsPermissionDenied(verdict.stop)) << verdict.stop;
}

TEST(ChoiceJoinsTest, AMembersTextsAcrossElementsAreOneText) {
  const guard::GuardConfig config;
  std::vector<ChoiceJoins::HeldOut> held;
  const char* parts[] = {"the key is AKIA", "IOSF", "ODNN", "7EXAMPLE ok"};
  for (int64_t i = 0; i < 4; ++i) {
    protocol::DeltaField text, format;
    text.path = {{"reasoning_details", i}, {"text", -1}};
    format.path = {{"reasoning_details", i}, {"format", -1}};
    held.push_back({format, "anthropic-claude-v1"});
    held.push_back({text, parts[i]});
  }
  std::sort(held.begin(), held.end(),
            [](const auto& a, const auto& b) { return a.field < b.field; });
  ChoiceJoins joins(config);
  joins.ContentReleased(0, "Done.");
  EXPECT_FALSE(joins.Finished(0, held).ok());
}

TEST(ChoiceJoinsTest, LongSignaturesAreNoLongerRefused) {
  const guard::GuardConfig config;
  for (const size_t size : {257, 1000, 4200, 20000}) {
    std::string signature;
    while (signature.size() < size) signature += "EqQBCkgIARABGAIiQL";
    signature.resize(size);
    protocol::DeltaField text, sig, format;
    text.path = {{"reasoning_details", 0}, {"text", -1}};
    sig.path = {{"reasoning_details", 0}, {"signature", -1}};
    format.path = {{"reasoning_details", 0}, {"format", -1}};
    ChoiceJoins joins(config);
    joins.ContentReleased(0, "The answer is 42.");
    const ChoiceJoins::Verdict verdict = joins.Finished(
        0, {{format, "anthropic-claude-v1"}, {sig, signature}, {text, "Let me think."}});
    EXPECT_TRUE(verdict.ok()) << size << ": " << verdict.stop;
  }
}

// Found by review helper-83: an image's data (OpenRouter's delta.images) over 64 KiB, read in
// the rest before the content, was refused as a token the window cut.
TEST(ChoiceJoinsTest, TheRestsLongDataIsNoTokenAClientJoins) {
  const guard::GuardConfig config;
  protocol::DeltaField url;
  url.path = {{"images", 0}, {"image_url", -1}, {"url", -1}};
  std::string data = "data:image/png;base64,";
  while (data.size() < 70000) data += "iVBORw0KGgoAAAANSUhEUg";
  ChoiceJoins joins(config);
  joins.ContentReleased(0, "Here is your image.");
  const ChoiceJoins::Verdict verdict = joins.Finished(0, {{url, data}});
  EXPECT_TRUE(verdict.ok()) << verdict.stop;
}

}  // namespace
}  // namespace pillar::stages
