#include "protocol/openai_response.h"

#include <simdjson.h>

#include <cstring>

#include "common/crypto.h"
#include "common/json_writer.h"
#include "common/strings.h"

namespace pillar::protocol {
namespace {

void WriteUsage(JsonWriter& w, const TokenUsage& usage) {
  w.Key("usage");
  w.BeginObject();
  w.Key("prompt_tokens");
  w.Int(usage.prompt_tokens);
  w.Key("completion_tokens");
  w.Int(usage.completion_tokens);
  w.Key("total_tokens");
  w.Int(usage.total_tokens());
  w.EndObject();
}

void WriteHead(JsonWriter& w, std::string_view id, std::string_view object, std::string_view model,
               int64_t created) {
  w.Key("id");
  w.String(id);
  w.Key("object");
  w.String(object);
  w.Key("created");
  w.Int(created);
  w.Key("model");
  w.String(model);
}

std::string CompletionBody(const Completion& c, bool chat) {
  JsonWriter w(256);
  w.BeginObject();
  WriteHead(w, c.id, chat ? "chat.completion" : "text_completion", c.model, c.created);
  w.Key("choices");
  w.BeginArray();
  for (size_t i = 0; i < c.choices.size(); ++i) {
    w.BeginObject();
    w.Key("index");
    w.Int(int64_t(i));
    if (chat) {
      w.Key("message");
      w.BeginObject();
      w.Key("role");
      w.String("assistant");
      w.Key("content");
      w.String(c.choices[i]);
      w.EndObject();
    } else {
      w.Key("text");
      w.String(c.choices[i]);
    }
    w.Key("finish_reason");
    w.String(c.finish_reason);
    w.EndObject();
  }
  w.EndArray();
  WriteUsage(w, c.usage);
  w.EndObject();
  return std::move(w).Take();
}

std::string Event(std::string json) { return StrCat("data: ", json, "\n\n"); }

}  // namespace

std::string OpenAiErrorBody(std::string_view message, std::string_view type,
                            std::string_view code) {
  JsonWriter w(128);
  w.BeginObject();
  w.Key("error");
  w.BeginObject();
  w.Key("message");
  w.String(message);
  w.Key("type");
  w.String(type);
  w.Key("param");
  w.Null();
  w.Key("code");
  if (code.empty()) {
    w.Null();
  } else {
    w.String(code);
  }
  w.EndObject();
  w.EndObject();
  return std::move(w).Take();
}

std::string ModelListBody(const std::vector<ListedModel>& models) {
  JsonWriter w(64 + models.size() * 96);
  w.BeginObject();
  w.Key("object");
  w.String("list");
  w.Key("data");
  w.BeginArray();
  for (const ListedModel& m : models) {
    w.BeginObject();
    w.Key("id");
    w.String(m.id);
    w.Key("object");
    w.String("model");
    w.Key("created");
    w.Int(m.created);
    w.Key("owned_by");
    w.String(m.owned_by);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return std::move(w).Take();
}

std::string ChatCompletionBody(const Completion& completion) {
  return CompletionBody(completion, true);
}

std::string TextCompletionBody(const Completion& completion) {
  return CompletionBody(completion, false);
}

std::string ChatChunkEvent(std::string_view id, std::string_view model, int64_t created,
                           int64_t index, std::string_view content, bool first,
                           std::string_view finish_reason) {
  JsonWriter w(160 + content.size());
  w.BeginObject();
  WriteHead(w, id, "chat.completion.chunk", model, created);
  w.Key("choices");
  w.BeginArray();
  w.BeginObject();
  w.Key("index");
  w.Int(index);
  w.Key("delta");
  w.BeginObject();
  if (first) {
    w.Key("role");
    w.String("assistant");
  }
  if (!content.empty() || finish_reason.empty()) {
    w.Key("content");
    w.String(content);
  }
  w.EndObject();
  w.Key("finish_reason");
  if (finish_reason.empty()) {
    w.Null();
  } else {
    w.String(finish_reason);
  }
  w.EndObject();
  w.EndArray();
  w.EndObject();
  return Event(std::move(w).Take());
}

std::string TextChunkEvent(std::string_view id, std::string_view model, int64_t created,
                           int64_t index, std::string_view text, std::string_view finish_reason) {
  JsonWriter w(160 + text.size());
  w.BeginObject();
  WriteHead(w, id, "text_completion", model, created);
  w.Key("choices");
  w.BeginArray();
  w.BeginObject();
  w.Key("index");
  w.Int(index);
  w.Key("text");
  w.String(text);
  w.Key("finish_reason");
  if (finish_reason.empty()) {
    w.Null();
  } else {
    w.String(finish_reason);
  }
  w.EndObject();
  w.EndArray();
  w.EndObject();
  return Event(std::move(w).Take());
}

std::string UsageChunkEvent(std::string_view id, std::string_view model, int64_t created,
                            const TokenUsage& usage, bool chat) {
  JsonWriter w(192);
  w.BeginObject();
  WriteHead(w, id, chat ? "chat.completion.chunk" : "text_completion", model, created);
  w.Key("choices");
  w.BeginArray();
  w.EndArray();
  WriteUsage(w, usage);
  w.EndObject();
  return Event(std::move(w).Take());
}

std::string EmbeddingsBody(std::string_view model, const std::vector<std::vector<float>>& vectors,
                           const TokenUsage& usage, bool base64) {
  JsonWriter w(128);
  w.BeginObject();
  w.Key("object");
  w.String("list");
  w.Key("data");
  w.BeginArray();
  for (size_t i = 0; i < vectors.size(); ++i) {
    w.BeginObject();
    w.Key("object");
    w.String("embedding");
    w.Key("index");
    w.Int(int64_t(i));
    w.Key("embedding");
    if (base64) {
      std::string bytes;
      bytes.reserve(vectors[i].size() * 4);
      for (float v : vectors[i]) {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        for (int b = 0; b < 4; ++b) bytes.push_back(char(bits >> (8 * b)));
      }
      w.String(Base64Encode(bytes));
    } else {
      w.BeginArray();
      for (float v : vectors[i]) w.Float(v);
      w.EndArray();
    }
    w.EndObject();
  }
  w.EndArray();
  w.Key("model");
  w.String(model);
  w.Key("usage");
  w.BeginObject();
  w.Key("prompt_tokens");
  w.Int(usage.prompt_tokens);
  w.Key("total_tokens");
  w.Int(usage.prompt_tokens);
  w.EndObject();
  w.EndObject();
  return std::move(w).Take();
}

namespace {

// The "usage" member of `top`: NotFound when there is none.
[[nodiscard]] absl::StatusOr<TokenUsage> ReadUsage(simdjson::dom::object top) {
  // Far above any real count, and low enough that a sum cannot overflow.
  constexpr int64_t kMaxCount = int64_t(1) << 40;
  simdjson::dom::element usage_element;
  if (top["usage"].get(usage_element) != simdjson::SUCCESS || usage_element.is_null()) {
    return absl::NotFoundError("the reply has no usage");
  }
  simdjson::dom::object usage;
  TokenUsage out;
  int64_t total = -1;
  if (usage_element.get(usage) != simdjson::SUCCESS ||
      usage["prompt_tokens"].get(out.prompt_tokens) != simdjson::SUCCESS || out.prompt_tokens < 0 ||
      out.prompt_tokens > kMaxCount) {
    return absl::InvalidArgumentError("usage.prompt_tokens must be a count");
  }
  // Embeddings report no completion tokens.
  if (simdjson::dom::element e; usage["completion_tokens"].get(e) == simdjson::SUCCESS) {
    if (e.get(out.completion_tokens) != simdjson::SUCCESS || out.completion_tokens < 0 ||
        out.completion_tokens > kMaxCount) {
      return absl::InvalidArgumentError("usage.completion_tokens must be a count");
    }
  }
  if (usage["total_tokens"].get(total) == simdjson::SUCCESS && total != out.total_tokens()) {
    return absl::InvalidArgumentError(StrCat("usage.total_tokens (", total,
                                             ") is not prompt plus completion tokens (",
                                             out.total_tokens(), ")"));
  }
  return out;
}

}  // namespace

[[nodiscard]] absl::StatusOr<TokenUsage> ParseUsage(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  simdjson::dom::object top;
  if (parser.parse(json.data(), json.size()).get(root) != simdjson::SUCCESS ||
      root.get(top) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("the reply is not a JSON object");
  }
  return ReadUsage(top);
}

[[nodiscard]] absl::StatusOr<StreamChunk> CheckStreamChunk(std::string_view data) {
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element root;
  simdjson::dom::object top;
  if (parser.parse(data.data(), data.size()).get(root) != simdjson::SUCCESS ||
      root.get(top) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("a chunk of the stream is not a JSON object");
  }
  if (simdjson::dom::element e; top["error"].get(e) == simdjson::SUCCESS && !e.is_null()) {
    return absl::InvalidArgumentError("the stream carried an error");
  }
  simdjson::dom::array choices;
  if (top["choices"].get(choices) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("a chunk of the stream has no \"choices\" array");
  }
  StreamChunk chunk;
  chunk.usage_only = choices.size() == 0;
  absl::StatusOr<TokenUsage> usage = ReadUsage(top);
  if (usage.ok()) {
    chunk.usage = *usage;
  } else if (!absl::IsNotFound(usage.status())) {
    return usage.status();
  }
  return chunk;
}

[[nodiscard]] absl::StatusOr<ReplyUsage> CheckGeneratedReply(std::string_view body,
                                                             bool embeddings) {
  // Each thread's parser keeps the capacity of the largest reply it read: a large one gets a
  // parser of its own, so that one does not pin its size for the life of the thread.
  thread_local simdjson::dom::parser cached;
  simdjson::dom::parser large;
  simdjson::dom::parser& parser = body.size() > (size_t(1) << 20) ? large : cached;
  simdjson::dom::element root;
  simdjson::dom::object top;
  if (parser.parse(body.data(), body.size()).get(root) != simdjson::SUCCESS ||
      root.get(top) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("the reply is not a JSON object");
  }
  if (simdjson::dom::element e; top["error"].get(e) == simdjson::SUCCESS && !e.is_null()) {
    return absl::InvalidArgumentError("the reply is an error, not an answer");
  }
  const char* member = embeddings ? "data" : "choices";
  simdjson::dom::array items;
  if (top[member].get(items) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(StrCat("the reply has no \"", member, "\" array"));
  }
  absl::StatusOr<TokenUsage> usage = ReadUsage(top);
  if (usage.ok()) return ReplyUsage{*usage, true};
  if (absl::IsNotFound(usage.status())) return ReplyUsage{};
  return usage.status();
}

}  // namespace pillar::protocol
