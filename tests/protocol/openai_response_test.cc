#include "protocol/openai_response.h"

#include <gtest/gtest.h>

#include "protocol/sse_reader.h"
#include "protocol/token_estimate.h"

namespace pillar::protocol {
namespace {

TEST(OpenAiResponseTest, ErrorsHaveOpenAisShape) {
  EXPECT_EQ(OpenAiErrorBody("no \"x\"", "invalid_request_error", "model_not_found"),
            R"({"error":{"message":"no \"x\"","type":"invalid_request_error","param":null,)"
            R"("code":"model_not_found"}})");
  EXPECT_EQ(OpenAiErrorBody("m", "server_error", ""),
            R"({"error":{"message":"m","type":"server_error","param":null,"code":null}})");
}

TEST(OpenAiResponseTest, CompletionsChunksAndTheirUsage) {
  Completion c;
  c.id = "chatcmpl-1";
  c.model = "m";
  c.created = 7;
  c.choices = {"Hi."};
  c.usage = {.prompt_tokens = 5, .completion_tokens = 2};
  const std::string body = ChatCompletionBody(c);
  EXPECT_EQ(body, R"({"id":"chatcmpl-1","object":"chat.completion","created":7,"model":"m",)"
                  R"("choices":[{"index":0,"message":{"role":"assistant","content":"Hi."},)"
                  R"("finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,)"
                  R"("total_tokens":7}})");
  absl::StatusOr<TokenUsage> usage = ParseUsage(body);
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->total_tokens(), 7);
  EXPECT_EQ(
      ChatChunkEvent("c", "m", 7, 0, "Hi", true, ""),
      "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"m\","
      "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},"
      "\"finish_reason\":null}]}\n\n");
  const std::string last = UsageChunkEvent("c", "m", 7, c.usage);
  ASSERT_EQ(last.substr(0, 6), "data: ");
  usage = ParseUsage(std::string_view(last).substr(6));
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->completion_tokens, 2);
}

TEST(OpenAiResponseTest, UsageThatDoesNotAddUpOrIsMissingIsSaidSo) {
  EXPECT_EQ(ParseUsage(R"({"choices":[]})").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ParseUsage(R"({"usage":null})").status().code(), absl::StatusCode::kNotFound);
  for (const char* bad :
       {R"({"usage":{"prompt_tokens":-1,"completion_tokens":1}})",
        R"({"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":3}})",
        R"({"usage":{"prompt_tokens":1.5}})", R"({"usage":{"prompt_tokens":9007199254740993}})",
        R"({"usage":{"prompt_tokens":1,"completion_tokens":"2"}})", "[1]", "{"}) {
    EXPECT_EQ(ParseUsage(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  absl::StatusOr<TokenUsage> embeddings = ParseUsage(R"({"usage":{"prompt_tokens":4,)"
                                                     R"("total_tokens":4}})");
  ASSERT_TRUE(embeddings.ok());
  EXPECT_EQ(embeddings->total_tokens(), 4);
}

TEST(OpenAiResponseTest, ModelListAndEmbeddings) {
  EXPECT_EQ(ModelListBody({{.id = "a", .created = 1, .owned_by = "pillar"}}),
            R"({"object":"list","data":[{"id":"a","object":"model","created":1,)"
            R"("owned_by":"pillar"}]})");
  EXPECT_EQ(EmbeddingsBody("e", {{0.5f, -1.0f}}, {.prompt_tokens = 2}),
            R"({"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5,-1]}],)"
            R"("model":"e","usage":{"prompt_tokens":2,"total_tokens":2}})");
}

TEST(TokenEstimateTest, WordsNumbersSymbolsAndCharacters) {
  EXPECT_EQ(EstimateTokens(""), 0);
  EXPECT_EQ(EstimateTokens("Hello, world!"), 4);
  EXPECT_EQ(EstimateTokens("internationalization"), 4);
  EXPECT_EQ(EstimateTokens("1234567"), 3);
  EXPECT_EQ(EstimateTokens("caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd"), 4);  // caf, é, two CJK
  // A stream chunk's texts: a delta's strings but its role, types and ids, a completion's text.
  EXPECT_EQ(EstimateChunkTokens(R"({"choices":[{"index":0,"delta":{"role":"assistant",)"
                                R"("content":"Hello, world!"}}]})"),
            4);
  EXPECT_EQ(EstimateChunkTokens(R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,)"
                                R"("id":"call_abcdefghijkl","type":"function","function":)"
                                R"({"name":"f","arguments":"Hello, world!"}}]}}]})"),
            1 + 4);
  EXPECT_EQ(EstimateChunkTokens(R"({"choices":[{"index":0,"text":"Hello, world!"},)"
                                R"({"index":1,"text":"internationalization"}]})"),
            4 + 4);
  EXPECT_EQ(EstimateChunkTokens(R"({"choices":[],"usage":{"prompt_tokens":9}})"), 0);
  EXPECT_EQ(EstimateChunkTokens("[DONE]"), 0);
  EXPECT_EQ(EstimateChunkTokens(R"({"choices":[{"delta":)"), 0);
}

}  // namespace
}  // namespace pillar::protocol
