#include "protocol/openai_texts.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pillar::protocol {
namespace {

TEST(OpenAiTextsTest, ARequestsTextsAreFoundWhereverTheyAreAndTheRestKept) {
  const std::string body =
      R"({"model":"m","tools":[{"type":"function","function":{"name":"f","description":"d"}}],)"
      R"("messages":[{"role":"system","content":"a"},{"role":"user","content":[)"
      R"({"type":"text","text":"b"},{"type":"image_url","image_url":{"url":"u"}}]},)"
      R"({"role":"assistant","content":null,"tool_calls":[{"id":"t"}]}]})";
  std::vector<std::string> seen;
  absl::StatusOr<std::string> out =
      EditRequestTexts(body, [&](std::string_view where, std::string_view text) {
        seen.push_back(std::string(where) + "=" + std::string(text));
        return std::optional<std::string>(std::string(text) + "!");
      });
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(seen,
            (std::vector<std::string>{"messages[0].content=a", "messages[1].content[0].text=b"}));
  EXPECT_EQ(
      *out,
      R"({"model":"m","tools":[{"type":"function","function":{"name":"f","description":"d"}}],)"
      R"("messages":[{"role":"system","content":"a!"},{"role":"user","content":[)"
      R"({"type":"text","text":"b!"},{"type":"image_url","image_url":{"url":"u"}}]},)"
      R"({"role":"assistant","content":null,"tool_calls":[{"id":"t"}]}]})");
  // Prompts and inputs, strings or arrays of them.
  seen.clear();
  ASSERT_TRUE(EditRequestTexts(R"({"model":"m","prompt":["x","y"],"input":"z"})",
                               [&](std::string_view where, std::string_view) {
                                 seen.push_back(std::string(where));
                                 return std::optional<std::string>();
                               })
                  .ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"prompt[0]", "prompt[1]", "input"}));
  EXPECT_FALSE(EditRequestTexts("[1]", [](std::string_view, std::string_view) {
                 return std::optional<std::string>();
               }).ok());
}

TEST(OpenAiTextsTest, AnAnswersChoicesAreFound) {
  absl::StatusOr<std::string> out = EditAnswerTexts(
      R"({"choices":[{"index":0,"message":{"role":"assistant","content":"hi"}},{"index":1,"text":"yo"}]})",
      [](std::string_view where, std::string_view text) {
        return std::optional<std::string>(std::string(where) + ":" + std::string(text));
      });
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, R"({"choices":[{"index":0,"message":{"role":"assistant","content":)"
                  R"("choices[0].message.content:hi"}},{"index":1,"text":"choices[1].text:yo"}]})");
}

TEST(OpenAiTextsTest, AChunksDeltasAreEditedByChoiceIndex) {
  std::vector<std::string> seen;
  absl::StatusOr<std::string> out = EditChunkTexts(
      R"({"id":"c","choices":[{"index":3,"delta":{"role":"assistant","content":"ab"},"finish_reason":null},)"
      R"({"index":4,"delta":{},"finish_reason":"stop"}]})",
      [&](int64_t index, std::string_view text, bool finished) {
        seen.push_back(std::to_string(index) + ":" + std::string(text) + (finished ? "!" : ""));
        return index == 4 ? std::string("held") : std::string(text.substr(0, 1));
      });
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(seen, (std::vector<std::string>{"3:ab", "4:!"}));
  // A delta without content gets one when there is text to release.
  EXPECT_EQ(
      *out,
      R"({"id":"c","choices":[{"index":3,"delta":{"role":"assistant","content":"a"},)"
      R"("finish_reason":null},{"index":4,"delta":{"content":"held"},"finish_reason":"stop"}]})");
  EXPECT_FALSE(EditChunkTexts("{not json", [](int64_t, std::string_view, bool) {
                 return std::string();
               }).ok());
}

}  // namespace
}  // namespace pillar::protocol
