#include "protocol/openai_texts.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pillar::protocol {
namespace {

std::optional<std::string> Keep(std::string_view, std::string_view) { return std::nullopt; }
const TextEdit kKeep = Keep;

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
  // Every string a client wrote, ids, types and URLs too (a chat template writes a tool call's
  // id into the prompt; an upstream fetches a URL), but the model and the messages' roles.
  EXPECT_EQ(seen, (std::vector<std::string>{
                      "tools[0].type=function", "tools[0].function.name=f",
                      "tools[0].function.description=d", "messages[0].content=a",
                      "messages[1].content[0].type=text", "messages[1].content[0].text=b",
                      "messages[1].content[1].type=image_url",
                      "messages[1].content[1].image_url.url=u", "messages[2].tool_calls[0].id=t"}));
  EXPECT_EQ(
      *out,
      R"({"model":"m","tools":[{"type":"function!","function":{"name":"f!","description":"d!"}}],)"
      R"("messages":[{"role":"system","content":"a!"},{"role":"user","content":[)"
      R"({"type":"text!","text":"b!"},{"type":"image_url!","image_url":{"url":"u!"}}]},)"
      R"({"role":"assistant","content":null,"tool_calls":[{"id":"t!"}]}]})");
  // A member named "model" or "role" elsewhere is text like any other.
  seen.clear();
  ASSERT_TRUE(EditRequestTexts(R"({"model":"m","metadata":{"model":"x","role":"y"}})",
                               [&](std::string_view where, std::string_view) {
                                 seen.push_back(std::string(where));
                                 return std::optional<std::string>();
                               })
                  .ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"metadata.model", "metadata.role"}));
  // Prompts and inputs, strings or arrays of them.
  seen.clear();
  ASSERT_TRUE(EditRequestTexts(R"({"model":"m","prompt":["x","y"],"input":"z"})",
                               [&](std::string_view where, std::string_view) {
                                 seen.push_back(std::string(where));
                                 return std::optional<std::string>();
                               })
                  .ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"prompt[0]", "prompt[1]", "input"}));
  // Numbers written as data (metadata, messages), not parameters (a seed), and unknown names.
  seen.clear();
  absl::StatusOr<std::string> numbers = EditRequestTexts(
      R"({"model":"m","seed":4111111111111111,"max_tokens":12345678,)"
      R"("metadata":{"card":4111111111111111,"n":12},"messages":[{"role":"user","content":"x"}]})",
      [&](std::string_view where, std::string_view text) -> std::optional<std::string> {
        seen.push_back(std::string(where) + "=" + std::string(text));
        if (text == "4111111111111111") return "<CREDIT_CARD>";
        return std::nullopt;
      });
  ASSERT_TRUE(numbers.ok()) << numbers.status();
  EXPECT_EQ(seen,
            (std::vector<std::string>{"a member's name in metadata=card",
                                      "metadata.card=4111111111111111", "messages[0].content=x"}));
  EXPECT_NE(numbers->find(R"("seed":4111111111111111)"), std::string::npos) << *numbers;
  EXPECT_NE(numbers->find(R"("card":"<CREDIT_CARD>")"), std::string::npos) << *numbers;
  EXPECT_FALSE(EditRequestTexts("[1]", [](std::string_view, std::string_view) {
                 return std::optional<std::string>();
               }).ok());
}

// Every string of an answer, names and codes too (a client shows them), and its logprobs
// withheld.
// Found by a review (helper-41): a float is read as JavaScript prints it, the shortest digits
// that read back as the same double, not its exact binary value.
TEST(OpenAiTextsTest, NumbersAreReadAsClientsPrintThem) {
  std::vector<std::string> seen;
  ASSERT_TRUE(EditAnswerTexts(R"({"a":4.111111111111117e18,"b":4.111111111111111e15,)"
                              R"("c":12345678909.0,"d":1.5e300,"e":123456.5,"f":12,)"
                              R"("g":4242424242424240001,"h":-4242424242424240001,)"
                              R"("i":9007199254740992})",
                              [&](std::string_view where, std::string_view text) {
                                if (!where.starts_with("a member's name")) {
                                  seen.push_back(std::string(text));
                                }
                                return std::optional<std::string>();
                              })
                  .ok());
  // An integer past 2^53 both as written (Python) and as JavaScript reads it (review helper-42).
  EXPECT_EQ(seen, (std::vector<std::string>{
                      "4111111111111117000", "4111111111111111", "12345678909", "1.5e+300",
                      "123456.5", "4242424242424240001 4242424242424240000",
                      "-4242424242424240001 -4242424242424240000", "9007199254740992"}));
}

TEST(OpenAiTextsTest, EveryStringOfAnAnswerIsFound) {
  absl::StatusOr<std::string> out = EditAnswerTexts(
      R"({"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},)"
      R"("logprobs":{"content":[{"token":"hi"}]}},{"index":1,"text":"yo"}],"usage":{"n":"u"}})",
      [](std::string_view where, std::string_view text) {
        return std::optional<std::string>(std::string(where) + ":" + std::string(text));
      });
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, R"({"id":"id:c","choices":[{"index":0,"message":{"role":)"
                  R"("choices[0].message.role:assistant","content":)"
                  R"("choices[0].message.content:hi"},"logprobs":null},)"
                  R"({"index":1,"text":"choices[1].text:yo"}],"usage":{"n":"usage.n:u"}})");
}

// A held edit that keeps every fragment as it came.
std::string KeepFragment(int64_t, const DeltaField&, std::string_view fragment) {
  return std::string(fragment);
}

TEST(OpenAiTextsTest, AChunksDeltasAreEditedByChoiceIndex) {
  std::vector<std::string> seen;
  absl::StatusOr<std::string> out = EditChunkTexts(
      R"({"id":"c","choices":[{"index":3,"delta":{"role":"assistant","content":"ab"},"finish_reason":null},)"
      R"({"index":4,"delta":{},"finish_reason":"stop"}]})",
      ChunkRoute::kChat,
      [&](int64_t index, std::string_view text, bool finished) {
        seen.push_back(std::to_string(index) + ":" + std::string(text) + (finished ? "!" : ""));
        return index == 4 ? std::string("held") : std::string(text.substr(0, 1));
      },
      KeepFragment, kKeep);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(seen, (std::vector<std::string>{"3:ab", "4:!"}));
  // A delta without content gets one when there is text to release.
  EXPECT_EQ(
      *out,
      R"({"id":"c","choices":[{"index":3,"delta":{"role":"assistant","content":"a"},)"
      R"("finish_reason":null},{"index":4,"delta":{"content":"held"},"finish_reason":"stop"}]})");
  const ChunkEdit none = [](int64_t, std::string_view, bool) { return std::string(); };
  EXPECT_FALSE(EditChunkTexts("{not json", ChunkRoute::kChat, none, KeepFragment, kKeep).ok());
  // Content the guard cannot read as text is an error, not copied.
  EXPECT_FALSE(EditChunkTexts(R"({"choices":[{"index":0,"delta":{"content":[{"text":"x"}]}}]})",
                              ChunkRoute::kChat, none, KeepFragment, kKeep)
                   .ok());
}

// "2:tool_calls[5].function.arguments" for a held fragment's key.
std::string Where(int64_t index, const DeltaField& field) {
  std::string out = std::to_string(index) + ":";
  for (size_t i = 0; i < field.path.size(); ++i) {
    out += (i > 0 ? "." : "") + field.path[i].key;
    if (field.path[i].element >= 0) out += "[" + std::to_string(field.path[i].element) + "]";
  }
  return out;
}

TEST(OpenAiTextsTest, ADeltasOtherTextsAreHeldByWhereTheyAre) {
  std::vector<std::string> held, others, structural;
  absl::StatusOr<std::string> out = EditChunkTexts(
      R"({"choices":[{"index":2,"delta":{"role":"assistant","refusal":"no","reasoning_content":"hm",)"
      R"("tool_calls":[{"index":5,"id":"t","type":"function","function":{"name":"f","arguments":"{a"}},)"
      R"({"function":{"arguments":":1}"}}],"function_call":{"arguments":"x"},)"
      R"("audio":{"id":"a1","transcript":"deep","expires_at":5}},)"
      R"("logprobs":{"content":[{"token":"x"}]}}]})",
      ChunkRoute::kChat, [](int64_t, std::string_view, bool) { return std::string(); },
      [&](int64_t index, const DeltaField& field, std::string_view fragment) {
        if (field.structural) {  // checked for coming in one piece, kept as it is
          structural.push_back(Where(index, field) + "=" + std::string(fragment));
          return std::string(fragment);
        }
        held.push_back(Where(index, field) + "=" + std::string(fragment));
        return std::string("H");
      },
      [&](std::string_view where, std::string_view text) {
        others.push_back(std::string(where) + "=" + std::string(text));
        return std::optional<std::string>("R");
      });
  ASSERT_TRUE(out.ok()) << out.status();
  // Every string clients join across chunks, by where it is: tool calls by their "index" (their
  // position when they have none); structural members are kept, a function's name among them (it
  // comes whole with its call's first delta, and a client may take it from there: review
  // helper-76).
  EXPECT_EQ(held,
            (std::vector<std::string>{"2:refusal=no", "2:reasoning_content=hm",
                                      "2:tool_calls[5].function.arguments={a",
                                      "2:tool_calls[1].function.arguments=:1}",
                                      "2:function_call.arguments=x", "2:audio.transcript=deep"}));
  EXPECT_EQ(structural,
            (std::vector<std::string>{
                "2:role=assistant", "2:tool_calls[5].id=t", "2:tool_calls[5].type=function",
                "2:tool_calls[5].function.name=f", "2:audio.id=a1", "2:audio.expires_at=5"}));
  // A number is taken as a structural member: in one piece. Log probabilities are withheld.
  EXPECT_TRUE(others.empty());
  EXPECT_EQ(
      *out,
      R"({"choices":[{"index":2,"delta":{"role":"assistant","refusal":"H","reasoning_content":"H",)"
      R"("tool_calls":[{"index":5,"id":"t","type":"function","function":{"name":"f","arguments":"H"}},)"
      R"({"function":{"arguments":"H"}}],"function_call":{"arguments":"H"},)"
      R"("audio":{"id":"a1","transcript":"H","expires_at":5}},"logprobs":null}]})");
  // What a guard writes out once it has them whole.
  const DeltaField arguments{.path = {{"tool_calls", 5}, {"function", -1}, {"arguments", -1}}};
  EXPECT_EQ(
      DeltaChoice(2, arguments, "{\"a\":1}"),
      R"({"index":2,"delta":{"tool_calls":[{"index":5,"function":{"arguments":"{\"a\":1}"}}]},)"
      R"("finish_reason":null})");
  // A tool call sent as an object with its index, not in a list (TGI 2.x): held by that index,
  // and written out in that form.
  held.clear();
  out = EditChunkTexts(
      R"({"choices":[{"index":0,"delta":{"tool_calls":{"index":3,"id":"t","type":"function",)"
      R"("function":{"name":"f","arguments":"{a"}}}}]})",
      ChunkRoute::kChat, [](int64_t, std::string_view, bool) { return std::string(); },
      [&](int64_t index, const DeltaField& field, std::string_view fragment) {
        if (field.structural) return std::string(fragment);
        held.push_back(Where(index, field) + "=" + std::string(fragment));
        EXPECT_TRUE(field.path.front().bare);
        return std::string("H");
      },
      kKeep);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(held, (std::vector<std::string>{"0:tool_calls[3].function.arguments={a"}));
  EXPECT_EQ(*out,
            R"({"choices":[{"index":0,"delta":{"tool_calls":{"index":3,"id":"t","type":"function",)"
            R"("function":{"name":"f","arguments":"H"}}}}]})");
  DeltaField bare = arguments;
  bare.path.front().bare = true;
  EXPECT_EQ(DeltaChoice(2, bare, "{}"),
            R"({"index":2,"delta":{"tool_calls":{"index":5,"function":{"arguments":"{}"}}},)"
            R"("finish_reason":null})");
  EXPECT_EQ(DeltaChoice(0, DeltaField{.path = {{"refusal", -1}}}, "no"),
            R"({"index":0,"delta":{"refusal":"no"},"finish_reason":null})");
  EXPECT_EQ(DeltaChoice(1, DeltaField{.path = {{"audio", -1}, {"transcript", -1}}}, "t"),
            R"({"index":1,"delta":{"audio":{"transcript":"t"}},"finish_reason":null})");
}

TEST(OpenAiTextsTest, AnIndexAClientCouldReadOtherwiseIsRefused) {
  const ChunkEdit none = [](int64_t, std::string_view, bool) { return std::string(); };
  for (
      const char* chunk : {
          R"({"choices":[{"index":0,"index":1,"delta":{"content":"x"}}]})",  // duplicated
          R"({"choices":[{"index":1.0,"delta":{"content":"x"}}]})",          // a float
          R"({"choices":[{"index":"1","delta":{"content":"x"}}]})",          // a string
          R"({"choices":[{"index":-1,"delta":{"content":"x"}}]})",           // negative
          R"({"choices":[{"index":18446744073709551615,"delta":{"content":"x"}}]})",
          R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1.5,"function":{"arguments":"x"}}]}}]})",
          R"({"choices":[{"index":0,"delta":{"tool_calls":{"index":"0","function":{"arguments":"x"}}}}]})",
          // A member named twice: a client keeps the last, the guard would read both.
          R"({"choices":[{"index":0,"delta":{"content":"a"},"delta":{"content":"b"}}]})",
          R"({"choices":[{"index":0,"delta":{"content":"a","content":"b"}}]})",
          R"({"choices":[{"index":0,"text":"a","text":"b"}]})",
          R"({"choices":[],"choices":[{"index":0,"delta":{"content":"b"}}]})",
          R"({"choices":[{"index":0,"delta":{"audio":{"transcript":"a","transcript":"b"}}}]})",
          // A list that mixes objects with other values; a choice without an index.
          R"({"choices":[{"index":0,"delta":{"foo":[{"index":0,"text":"a"},"x"]}}]})",
          R"({"choices":[{"index":0,"delta":{"foo":["x",{"text":"a"}]}}]})",
          R"({"choices":[{"delta":{"content":"x"}}]})",
          // A list of other values than objects, which clients extend or join as text; a
          // structural member that is not a string, whose strings clients would join.
          R"({"choices":[{"index":0,"delta":{"refusal":["AKIAIOSF"]}}]})",
          R"({"choices":[{"index":0,"delta":{"role":{"x":"a"}}}]})",
          R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":[1]}]}}]})",
          // Two elements of one index in one list: openai-python keeps both, by position.
          R"({"choices":[{"index":0,"delta":{"foo":[{"index":0,"id":""},{"index":0,"id":"x"}]}}]})",
      }) {
    EXPECT_FALSE(EditChunkTexts(chunk, ChunkRoute::kChat, none, KeepFragment, kKeep).ok()) << chunk;
  }
}

TEST(OpenAiTextsTest, StringsElsewhereInAChunkAreScreenedWhole) {
  std::vector<std::string> others, names;
  absl::StatusOr<std::string> out = EditChunkTexts(
      R"({"id":"c","extra":{"note":"n1"},"choices":[{"index":0,"message":{"content":"m1"},)"
      R"("delta":{},"finish_reason":null,"annotation":{"url":"u1"}},"s"]})",
      ChunkRoute::kChat, [](int64_t, std::string_view, bool) { return std::string(); },
      KeepFragment,
      [&](std::string_view where, std::string_view text) -> std::optional<std::string> {
        if (where.starts_with("a member's name")) {
          names.push_back(std::string(where) + "=" + std::string(text));
          return text == "extra" ? std::optional<std::string>("X") : std::nullopt;
        }
        others.push_back(std::string(where) + "=" + std::string(text));
        return std::optional<std::string>("R");
      });
  ASSERT_TRUE(out.ok()) << out.status();
  // Names and codes too ("id"): a client shows them as they come. A choice's "message" is
  // withheld (null), as its log probabilities are: a client adding it up chunk by chunk would
  // read what a guard holds back of the delta.
  EXPECT_EQ(others, (std::vector<std::string>{"id=c", "X.note=n1", "choices[0].annotation.url=u1",
                                              "choices[1]=s"}));
  // And the names the API does not know, which a replacement renames.
  EXPECT_EQ(names, (std::vector<std::string>{"a member's name in the body=extra",
                                             "a member's name in X=note",
                                             "a member's name in choices[0]=annotation"}));
  EXPECT_EQ(*out, R"({"id":"R","X":{"note":"R"},"choices":[{"index":0,"message":null,)"
                  R"("delta":{},"finish_reason":null,"annotation":{"url":"R"}},"R"]})");
}

TEST(OpenAiTextsTest, LinksAndAttachmentsAreToldApartFromPromptText) {
  EXPECT_TRUE(IsLink("messages[0].content[1].image_url.url"));
  EXPECT_TRUE(IsLink("messages[0].content[1].image_url"));
  EXPECT_TRUE(IsLink("messages[0].content[0].file.file_data"));
  EXPECT_TRUE(IsLink("extra.deep.x[0].File_URL"));
  EXPECT_TRUE(IsLink("tools[0].function.parameters.url"));
  EXPECT_FALSE(IsLink("messages[0].content"));
  EXPECT_FALSE(IsLink("metadata.curl"));
  // Only a message's attachments are no prompt text: a link elsewhere (a tool's schema) and a
  // content that starts with "data:" are read by the model (found by review helper-47).
  EXPECT_TRUE(IsAttachment("messages[0].content[1].image_url.url"));
  EXPECT_TRUE(IsAttachment("messages[2].content[0].file.file_data"));
  EXPECT_TRUE(IsAttachment("messages[0].content[3].input_audio.data"));
  EXPECT_FALSE(IsAttachment("tools[0].function.parameters.url"));
  EXPECT_FALSE(IsAttachment("messages[0].content"));
  EXPECT_FALSE(IsAttachment("messages[0].content[0].text"));
}

}  // namespace
}  // namespace pillar::protocol
