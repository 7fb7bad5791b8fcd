// Internal to src/protocol: how openai_texts.cc and openai_chunk_texts.cc walk a body's JSON
// (openai_json_walk.h).
#include "protocol/openai_json_walk.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <string>

#include "common/json_writer.h"
#include "common/strings.h"
#include "protocol/number_text.h"

namespace pillar::protocol::internal {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

// Whether `path` is `pattern`, where '#' in the pattern stands for an array index.
bool MatchPath(std::string_view path, std::string_view pattern) {
  size_t p = 0;
  for (size_t q = 0; q < pattern.size(); ++q) {
    if (pattern[q] == '#') {
      const size_t digits = p;
      while (p < path.size() && path[p] >= '0' && path[p] <= '9') ++p;
      if (p == digits) return false;
      continue;
    }
    if (p >= path.size() || path[p] != pattern[q]) return false;
    ++p;
  }
  return p == path.size();
}

// The last member name of a path (".a[0].b" -> "b"; an array item -> "").
std::string_view LastKey(std::string_view path) {
  if (path.empty() || path.back() == ']') return {};
  const size_t dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

// Members that hold names and codes, not text anyone wrote: never screened.
bool Structural(std::string_view key) {
  return key == "model" || key == "role" || key == "type" || key == "id" || key == "tool_call_id" ||
         key == "object" || key == "finish_reason" || key == "url" || key == "encoding_format" ||
         key == "detail";
}

// An answer's token-by-token log probabilities repeat its text a token at a time, which no
// screen sees whole: they are withheld (null) wherever the answer is screened.
static bool Withheld(std::string_view path) { return MatchPath(path, ".choices[#].logprobs"); }

// The member names of the OpenAI API's requests, answers and chunks (and of the JSON schemas
// tools declare), sorted: any other name is one a client or an upstream chose, which can carry
// a value as well as a string can.
// clang-format off
constexpr std::string_view kKnownNames[] = {
    "additionalProperties", "annotations", "arguments", "audio", "audio_tokens", "bytes",
    "cached_tokens", "choices", "code", "completion_tokens", "completion_tokens_details",
    "content", "created", "data", "delta", "description", "detail", "embedding", "encoding_format",
    "enum", "error", "expires_at", "file", "file_id", "finish_reason", "format",
    "frequency_penalty", "function", "function_call", "id", "image_url", "include_usage", "index",
    "input", "input_audio", "items", "json_schema", "logit_bias", "logprob", "logprobs",
    "max_completion_tokens", "max_tokens", "message", "messages", "metadata", "model", "n", "name",
    "object", "parallel_tool_calls", "parameters", "presence_penalty", "prompt", "prompt_tokens",
    "prompt_tokens_details", "properties", "reasoning", "reasoning_content", "reasoning_tokens",
    "refusal", "required", "response_format", "role", "schema", "seed", "service_tier", "stop",
    "stop_reason", "stream", "stream_options", "strict", "suffix", "system_fingerprint",
    "temperature", "text", "title", "token", "tool_call_id", "tool_calls", "tool_choice", "tools",
    "top_logprobs", "top_p", "total_tokens", "transcript", "type", "url", "usage", "user"};
// clang-format on
static_assert(std::is_sorted(std::begin(kKnownNames), std::end(kKnownNames)));

bool KnownName(std::string_view name) {
  return std::binary_search(std::begin(kKnownNames), std::end(kKnownNames), name);
}

// A member's name, `name`, of the object at `path`, as it goes out: one the API does not know
// goes through `edit` as the text at "a member's name in PATH" (a client sees names as it sees
// strings), and what replaces it, kept in `renamed`, renames the member.
std::string_view MemberName(std::string_view name, std::string_view path, TextEdit edit,
                            std::string& renamed) {
  if (KnownName(name)) return name;
  const std::string where =
      StrCat("a member's name in ", path.empty() ? std::string_view("the body") : path.substr(1));
  std::optional<std::string> replaced = edit(where, name);
  if (!replaced) return name;
  renamed = std::move(*replaced);
  return renamed;
}

// Copies `e` to `out` minified, replacing what `texts` says.
void Copy(element e, std::string& path, const Texts& texts, std::string& out) {
  const PathTest is_text = texts.is_text;
  const TextEdit edit = texts.edit;
  if (Withheld(path)) {
    out.append("null");
    return;
  }
  switch (e.type()) {
    case element_type::OBJECT: {
      out.push_back('{');
      bool first = true;
      for (auto field : object(e)) {
        if (!first) out.push_back(',');
        first = false;
        std::string renamed;
        const std::string_view name =
            texts.names ? MemberName(field.key, path, edit, renamed) : field.key;
        AppendJsonString(out, name);
        out.push_back(':');
        const size_t mark = path.size();
        path.push_back('.');
        path.append(name);
        Copy(field.value, path, texts, out);
        path.resize(mark);
      }
      out.push_back('}');
      return;
    }
    case element_type::ARRAY: {
      out.push_back('[');
      size_t index = 0;
      for (element item : array(e)) {
        if (index > 0) out.push_back(',');
        const size_t mark = path.size();
        StrAppend(&path, "[", index++, "]");
        Copy(item, path, texts, out);
        path.resize(mark);
      }
      out.push_back(']');
      return;
    }
    case element_type::STRING:
      if (is_text(path)) {
        const std::string_view text(e);
        std::optional<std::string> replaced = edit(std::string_view(path).substr(1), text);
        AppendJsonString(out, replaced ? std::string_view(*replaced) : text);
        return;
      }
      break;
    case element_type::INT64:
    case element_type::UINT64:
    case element_type::DOUBLE: {
      if (texts.numbers == nullptr || !texts.numbers(path)) break;
      const std::string text = NumberText(e);
      if (text.size() < texts.shortest_number) break;
      std::optional<std::string> replaced = edit(std::string_view(path).substr(1), text);
      if (!replaced) break;
      AppendJsonString(out, *replaced);
      return;
    }
    default:
      break;
  }
  out.append(simdjson::minify(e));
}

[[nodiscard]] absl::StatusOr<std::string> Edit(std::string_view body, const Texts& texts) {
  simdjson::dom::parser parser;
  element root;
  if (parser.parse(body.data(), body.size()).get(root) != simdjson::SUCCESS ||
      root.type() != element_type::OBJECT) {
    return absl::InvalidArgumentError("the body is not a JSON object");
  }
  std::string out;
  out.reserve(body.size() + 16);
  std::string path;
  Copy(root, path, texts, out);
  return out;
}

// Every string of an answer (and of a chunk, but its deltas' texts), the structural members
// too: a client shows an answer's names and codes as they come (its id, its model, a tool
// call's id), so a value there reaches it as well.
bool AnswerText(std::string_view) { return true; }

}  // namespace pillar::protocol::internal
