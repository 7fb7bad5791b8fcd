#include "protocol/openai_request.h"

#include <gtest/gtest.h>

#include <string>

namespace pillar::protocol {
namespace {

TEST(OpenAiRequestTest, AChatRequestAsTheOfficialClientsSendIt) {
  absl::StatusOr<ChatRequest> r = ParseChatRequest(R"({
    "model": "llama-3-8b", "stream": true, "stream_options": {"include_usage": true},
    "max_completion_tokens": 64, "temperature": 0.2, "tools": [{"type": "function"}],
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                   {"type": "image_url", "image_url": {"url": "x"}},
                                   {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null, "tool_calls": []}]})",
                                                   {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "llama-3-8b");
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(r->max_tokens, 64);
  EXPECT_EQ(r->n, 1);
  ASSERT_EQ(r->messages.size(), 3u);
  EXPECT_EQ(r->messages[0].text, "Be brief.");
  EXPECT_EQ(r->messages[1].text, "Hi\nthere");
  EXPECT_EQ(r->messages[1].other_parts, 1u);
  EXPECT_EQ(r->messages[2].role, "assistant");
  EXPECT_EQ(r->messages[2].text, "");
}

TEST(OpenAiRequestTest, BadRequestsAreRefusedNamingTheField) {
  const OpenAiLimits limits{.max_messages = 2, .max_n = 2, .max_tokens = 100};
  const std::pair<const char*, const char*> cases[] = {
      {"[]", "must be a JSON object"},
      {"{\"model\": \"m\"", "not valid JSON"},
      {R"({"messages": [{"role": "user", "content": "x"}]})", "model is required"},
      {R"({"model": "", "messages": [{"role": "user", "content": "x"}]})", "model must be"},
      {R"({"model": "m", "messages": []})", "messages must hold from 1 to 2"},
      {R"({"model": "m", "messages": [{"role": "king", "content": "x"}]})",
       "messages[0].role must be one of"},
      {R"({"model": "m", "messages": [{"role": "user"}]})", "messages[0].content is required"},
      {R"({"model": "m", "messages": [{"role": "user", "content": 3}]})",
       "messages[0].content must be a string"},
      {R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "text"}]}]})",
       "messages[0].content[0] has no \"text\""},
      {R"({"model": "m", "n": 3, "messages": [{"role": "user", "content": "x"}]})",
       "n must be an integer from 1 to 2"},
      {R"({"model": "m", "max_tokens": 101, "messages": [{"role": "user", "content": "x"}]})",
       "max_tokens must be an integer from 1 to 100"},
      {R"({"model": "m", "stream": "yes", "messages": [{"role": "user", "content": "x"}]})",
       "stream must be true or false"},
      {R"({"model": "m", "stream_options": {"include_usage": true},
           "messages": [{"role": "user", "content": "x"}]})",
       "stream_options is only allowed"},
      // A second "model" or "messages" could be what an upstream reads: refused.
      {R"({"model": "a", "model": "b", "messages": [{"role": "user", "content": "x"}]})",
       "'model' appears twice"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x", "content": "y"}]})",
       "messages[0].content appears twice"},
  };
  for (const auto& [body, error] : cases) {
    absl::StatusOr<ChatRequest> r = ParseChatRequest(body, limits);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(r.status().message()).find(error), std::string::npos)
        << body << " -> " << r.status();
  }
}

TEST(OpenAiRequestTest, DeepNestingIsRefusedBeforeItCostsAnything) {
  std::string body = R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "x": )";
  body += std::string(100, '[') + std::string(100, ']') + "}";
  EXPECT_FALSE(ParseChatRequest(body, {}).ok());
}

TEST(OpenAiRequestTest, CompletionsAndEmbeddingsTakeAStringOrStrings) {
  absl::StatusOr<CompletionRequest> c =
      ParseCompletionRequest(R"({"model": "m", "prompt": ["a", "b"], "max_tokens": 5})", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->prompts, (std::vector<std::string>{"a", "b"}));
  absl::StatusOr<EmbeddingsRequest> e =
      ParseEmbeddingsRequest(R"({"model": "m", "input": "hello"})", {});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->inputs, (std::vector<std::string>{"hello"}));
  EXPECT_FALSE(ParseEmbeddingsRequest(R"({"model": "m", "input": [[1, 2]]})", {}).ok());
  EXPECT_FALSE(ParseEmbeddingsRequest(R"({"model": "m", "input": []})", {}).ok());
}

TEST(OpenAiRequestTest, TheUpstreamGetsItsModelNameAndUsageInStreamsAndEverythingElse) {
  const std::string body =
      R"({"messages": [{"role": "user", "content": "\u00e9 \"q\""}], "model": "chat",)"
      R"( "stream": true, "stream_options": {"include_usage": false, "x": 1}, "tools": [1, 2]})";
  absl::StatusOr<std::string> out = RewriteForUpstream(body, "llama-3-8b", true);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, R"({"model":"llama-3-8b","messages":[{"role":"user","content":"é \"q\""}],)"
                  R"("stream":true,"tools":[1,2],"stream_options":{"include_usage":true,"x":1}})");
  out = RewriteForUpstream(R"({"model": "chat", "input": "x"})", "m\"2", false);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, R"({"model":"m\"2","input":"x"})");
  EXPECT_FALSE(RewriteForUpstream(R"({"model": "a", "model": "b"})", "m", false).ok());
  // The model's default length, for a request that named none (or named null).
  out =
      RewriteForUpstream(R"({"model": "chat", "max_tokens": null, "prompt": "x"})", "m", false, 5);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, R"({"model":"m","max_tokens":5,"prompt":"x"})");
}

TEST(OpenAiRequestTest, OtherServersNamesForTheLengthAreRefused) {
  for (const char* alias : {"n_predict", "max_new_tokens", "num_predict", "max_length"}) {
    const std::string body =
        std::string(R"({"model":"m","messages":[{"role":"user","content":"x"}],")") + alias +
        R"(":-1})";
    absl::StatusOr<ChatRequest> chat = ParseChatRequest(body, {});
    ASSERT_FALSE(chat.ok()) << alias;
    EXPECT_NE(chat.status().message().find("the length of an answer is max_tokens"),
              std::string::npos)
        << chat.status();
    EXPECT_FALSE(ParseCompletionRequest(
                     std::string(R"({"model":"m","prompt":"x",")") + alias + R"(":5})", {})
                     .ok());
  }
}

TEST(OpenAiRequestTest, BestOfCountsAsTheChoicesGenerated) {
  auto completion = ParseCompletionRequest(R"({"model":"m","prompt":"x","n":2,"best_of":5})", {});
  ASSERT_TRUE(completion.ok()) << completion.status();
  EXPECT_EQ(completion->n, 5);
  EXPECT_FALSE(ParseCompletionRequest(R"({"model":"m","prompt":"x","best_of":0})", {}).ok());
}

TEST(OpenAiRequestTest, TheLargerOfMaxTokensAndMaxCompletionTokensBoundsTheCall) {
  auto chat =
      ParseChatRequest(R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":40,)"
                       R"("max_completion_tokens":30})",
                       {});
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->max_tokens, 40);
}

}  // namespace
}  // namespace pillar::protocol
