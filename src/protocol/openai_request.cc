#include "protocol/openai_request.h"

#include <simdjson.h>

#include <algorithm>
#include <set>

#include "common/json_writer.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace pillar::protocol {
namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

[[nodiscard]] absl::Status Invalid(std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(StrCat(field, " ", what));
}

// The body's top-level object, every key once.
[[nodiscard]] absl::StatusOr<object> ParseTop(simdjson::dom::parser& parser, std::string_view body,
                                              const OpenAiLimits& limits) {
  element root;
  if (parser.allocate(std::max<size_t>(body.size(), 64), limits.max_nesting) != simdjson::SUCCESS ||
      parser.parse(body.data(), body.size()).get(root) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("the body is not valid JSON");
  }
  object top;
  if (root.get(top) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("the body must be a JSON object");
  }
  std::set<std::string_view> seen;
  for (auto field : top) {
    if (!seen.insert(field.key).second) {
      return Invalid(StrCat("'", field.key, "'"), "appears twice");
    }
  }
  return top;
}

[[nodiscard]] absl::Status ReadModel(object top, std::string& model) {
  std::string_view value;
  element e;
  if (top["model"].get(e) != simdjson::SUCCESS) return Invalid("model", "is required");
  if (e.get(value) != simdjson::SUCCESS || value.empty() || value.size() > 256) {
    return Invalid("model", "must be a non-empty string of at most 256 bytes");
  }
  model = std::string(value);
  return absl::OkStatus();
}

[[nodiscard]] absl::Status ReadBool(object top, std::string_view key, bool& out) {
  element e;
  if (top[key].get(e) != simdjson::SUCCESS || e.is_null()) return absl::OkStatus();
  if (e.get(out) != simdjson::SUCCESS) return Invalid(key, "must be true or false");
  return absl::OkStatus();
}

[[nodiscard]] absl::Status ReadCount(object top, std::string_view key, int64_t max,
                                     std::optional<int64_t>& out) {
  element e;
  if (top[key].get(e) != simdjson::SUCCESS || e.is_null()) return absl::OkStatus();
  int64_t value;
  if (e.get(value) != simdjson::SUCCESS || value < 1 || value > max) {
    return Invalid(key, StrCat("must be an integer from 1 to ", max));
  }
  out = value;
  return absl::OkStatus();
}

// stream, stream_options.include_usage, max_tokens (or max_completion_tokens), n.
[[nodiscard]] absl::Status ReadGeneration(object top, const OpenAiLimits& limits, bool& stream,
                                          bool& include_usage, std::optional<int64_t>& max_tokens,
                                          int64_t& n) {
  PILLAR_RETURN_IF_ERROR(ReadBool(top, "stream", stream));
  element options;
  if (top["stream_options"].get(options) == simdjson::SUCCESS && !options.is_null()) {
    object o;
    if (options.get(o) != simdjson::SUCCESS) return Invalid("stream_options", "must be an object");
    PILLAR_RETURN_IF_ERROR(ReadBool(o, "include_usage", include_usage));
    if (!stream) return Invalid("stream_options", "is only allowed with \"stream\": true");
  }
  PILLAR_RETURN_IF_ERROR(ReadCount(top, "max_tokens", limits.max_tokens, max_tokens));
  std::optional<int64_t> completion_tokens;
  PILLAR_RETURN_IF_ERROR(
      ReadCount(top, "max_completion_tokens", limits.max_tokens, completion_tokens));
  // Both named: the larger bounds what an upstream (reading either) may generate.
  if (completion_tokens) max_tokens = std::max(max_tokens.value_or(0), *completion_tokens);
  std::optional<int64_t> choices;
  PILLAR_RETURN_IF_ERROR(ReadCount(top, "n", limits.max_n, choices));
  n = choices.value_or(1);
  // Completions' best_of: the upstream generates that many choices (and returns n of them), so
  // that is how many count against the caps and are reserved.
  std::optional<int64_t> best_of;
  PILLAR_RETURN_IF_ERROR(ReadCount(top, "best_of", limits.max_n, best_of));
  n = std::max(n, best_of.value_or(1));
  // Other servers' own names for the length (llama.cpp's n_predict, TGI's max_new_tokens,
  // Ollama's num_predict, max_length): an upstream reading one would not be bound by the
  // max_tokens pillar checked, capped and reserved tokens for.
  for (std::string_view alias : {"n_predict", "max_new_tokens", "num_predict", "max_length"}) {
    element e;
    if (top[alias].get(e) == simdjson::SUCCESS) {
      return Invalid(alias, "is not accepted: the length of an answer is max_tokens");
    }
  }
  return absl::OkStatus();
}

// A message's content: a string, null (an assistant message with tool calls), or an array of
// parts of which the "text" ones are text.
[[nodiscard]] absl::Status ReadContent(element content, std::string_view field,
                                       ChatMessage& message) {
  if (content.is_null()) return absl::OkStatus();
  std::string_view text;
  if (content.get(text) == simdjson::SUCCESS) {
    message.text = std::string(text);
    return absl::OkStatus();
  }
  array parts;
  if (content.get(parts) != simdjson::SUCCESS) {
    return Invalid(field, "must be a string, an array of content parts, or null");
  }
  size_t index = 0;
  for (element part : parts) {
    const std::string name = StrCat(field, "[", index++, "]");
    object p;
    std::string_view type;
    if (part.get(p) != simdjson::SUCCESS || p["type"].get(type) != simdjson::SUCCESS) {
      return Invalid(name, "must be an object with a \"type\"");
    }
    if (type != "text") {
      ++message.other_parts;
      continue;
    }
    if (p["text"].get(text) != simdjson::SUCCESS) return Invalid(name, "has no \"text\" string");
    if (!message.text.empty()) message.text.push_back('\n');
    message.text.append(text);
  }
  return absl::OkStatus();
}

[[nodiscard]] absl::Status ReadMessages(object top, const OpenAiLimits& limits,
                                        std::vector<ChatMessage>& out) {
  array messages;
  if (top["messages"].get(messages) != simdjson::SUCCESS) {
    return Invalid("messages", "must be an array of messages");
  }
  if (messages.size() == 0 || messages.size() > limits.max_messages) {
    return Invalid("messages", StrCat("must hold from 1 to ", limits.max_messages, " messages"));
  }
  static const std::set<std::string_view> kRoles = {"system",    "developer", "user",
                                                    "assistant", "tool",      "function"};
  size_t index = 0;
  for (element m : messages) {
    const std::string field = StrCat("messages[", index++, "]");
    object o;
    if (m.get(o) != simdjson::SUCCESS) return Invalid(field, "must be an object");
    std::set<std::string_view> seen;
    for (auto member : o) {
      if (!seen.insert(member.key).second) {
        return Invalid(StrCat(field, ".", member.key), "appears twice");
      }
    }
    ChatMessage message;
    std::string_view role;
    if (o["role"].get(role) != simdjson::SUCCESS || !kRoles.contains(role)) {
      return Invalid(StrCat(field, ".role"),
                     "must be one of system, developer, user, assistant, tool, function");
    }
    message.role = std::string(role);
    element content;
    if (o["content"].get(content) == simdjson::SUCCESS) {
      PILLAR_RETURN_IF_ERROR(ReadContent(content, StrCat(field, ".content"), message));
    } else if (role != "assistant") {
      return Invalid(StrCat(field, ".content"), "is required");
    }
    out.push_back(std::move(message));
  }
  return absl::OkStatus();
}

// A string, or an array of strings (arrays of token ids are not taken: pillar screens and
// counts text).
[[nodiscard]] absl::Status ReadTexts(object top, std::string_view key, size_t max,
                                     std::vector<std::string>& out) {
  element e;
  if (top[key].get(e) != simdjson::SUCCESS) return Invalid(key, "is required");
  std::string_view text;
  if (e.get(text) == simdjson::SUCCESS) {
    out.emplace_back(text);
    return absl::OkStatus();
  }
  array items;
  if (e.get(items) != simdjson::SUCCESS || items.size() == 0 || items.size() > max) {
    return Invalid(key, StrCat("must be a string or an array of 1 to ", max, " strings"));
  }
  for (element item : items) {
    if (item.get(text) != simdjson::SUCCESS) {
      return Invalid(key, "must hold strings (token arrays are not accepted)");
    }
    out.emplace_back(text);
  }
  return absl::OkStatus();
}

}  // namespace

[[nodiscard]] absl::StatusOr<ChatRequest> ParseChatRequest(std::string_view body,
                                                           const OpenAiLimits& limits) {
  simdjson::dom::parser parser;
  PILLAR_ASSIGN_OR_RETURN(object top, ParseTop(parser, body, limits));
  ChatRequest request;
  PILLAR_RETURN_IF_ERROR(ReadModel(top, request.model));
  PILLAR_RETURN_IF_ERROR(ReadMessages(top, limits, request.messages));
  PILLAR_RETURN_IF_ERROR(ReadGeneration(top, limits, request.stream, request.include_usage,
                                        request.max_tokens, request.n));
  return request;
}

[[nodiscard]] absl::StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body,
                                                                       const OpenAiLimits& limits) {
  simdjson::dom::parser parser;
  PILLAR_ASSIGN_OR_RETURN(object top, ParseTop(parser, body, limits));
  CompletionRequest request;
  PILLAR_RETURN_IF_ERROR(ReadModel(top, request.model));
  PILLAR_RETURN_IF_ERROR(ReadTexts(top, "prompt", limits.max_inputs, request.prompts));
  PILLAR_RETURN_IF_ERROR(ReadGeneration(top, limits, request.stream, request.include_usage,
                                        request.max_tokens, request.n));
  return request;
}

[[nodiscard]] absl::StatusOr<EmbeddingsRequest> ParseEmbeddingsRequest(std::string_view body,
                                                                       const OpenAiLimits& limits) {
  simdjson::dom::parser parser;
  PILLAR_ASSIGN_OR_RETURN(object top, ParseTop(parser, body, limits));
  EmbeddingsRequest request;
  PILLAR_RETURN_IF_ERROR(ReadModel(top, request.model));
  PILLAR_RETURN_IF_ERROR(ReadTexts(top, "input", limits.max_inputs, request.inputs));
  element format;
  if (top["encoding_format"].get(format) == simdjson::SUCCESS && !format.is_null()) {
    std::string_view value;
    if (format.get(value) != simdjson::SUCCESS || (value != "float" && value != "base64")) {
      return Invalid("encoding_format", "must be \"float\" or \"base64\"");
    }
    request.base64 = value == "base64";
  }
  return request;
}

[[nodiscard]] absl::StatusOr<std::string> RewriteForUpstream(std::string_view body,
                                                             std::string_view upstream_model,
                                                             bool include_usage,
                                                             std::optional<int64_t> max_tokens) {
  simdjson::dom::parser parser;
  PILLAR_ASSIGN_OR_RETURN(object top, ParseTop(parser, body, OpenAiLimits{}));
  std::string out;
  out.reserve(body.size() + 64);
  out.push_back('{');
  auto key = [&](std::string_view k) {
    if (out.size() > 1) out.push_back(',');
    AppendJsonString(out, k);
    out.push_back(':');
  };
  key("model");
  AppendJsonString(out, upstream_model);
  if (max_tokens.has_value()) {
    key("max_tokens");
    out.append(std::to_string(*max_tokens));
  }
  for (auto field : top) {
    if (field.key == "model" || (include_usage && field.key == "stream_options")) continue;
    // Only set for a request that named no length; a null one is replaced.
    if (max_tokens.has_value() &&
        (field.key == "max_tokens" || field.key == "max_completion_tokens"))
      continue;
    key(field.key);
    out.append(simdjson::minify(field.value));
  }
  if (include_usage) {
    key("stream_options");
    // What the client asked of stream_options besides usage is kept.
    object options;
    std::string rest;
    if (top["stream_options"].get(options) == simdjson::SUCCESS) {
      for (auto field : options) {
        if (field.key == "include_usage") continue;
        rest += ",";
        AppendJsonString(rest, field.key);
        rest += ":";
        rest.append(simdjson::minify(field.value));
      }
    }
    out.append("{\"include_usage\":true");
    out.append(rest);
    out.push_back('}');
  }
  out.push_back('}');
  return out;
}

}  // namespace pillar::protocol
