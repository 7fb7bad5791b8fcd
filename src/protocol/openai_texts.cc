#include "protocol/openai_texts.h"

#include <simdjson.h>

#include "common/json_writer.h"
#include "common/strings.h"

namespace pillar::protocol {
namespace {

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

using PathTest = bool (*)(std::string_view path);

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
bool Withheld(std::string_view path) { return MatchPath(path, ".choices[#].logprobs"); }

// Copies `e` to `out` minified, replacing the strings whose path passes `is_text` by `edit`.
void Copy(element e, std::string& path, PathTest is_text, TextEdit edit, std::string& out) {
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
        AppendJsonString(out, field.key);
        out.push_back(':');
        const size_t mark = path.size();
        path.push_back('.');
        path.append(field.key);
        Copy(field.value, path, is_text, edit, out);
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
        Copy(item, path, is_text, edit, out);
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
      [[fallthrough]];
    default:
      out.append(simdjson::minify(e));
  }
}

[[nodiscard]] absl::StatusOr<std::string> Edit(std::string_view body, PathTest is_text,
                                               TextEdit edit) {
  simdjson::dom::parser parser;
  element root;
  if (parser.parse(body.data(), body.size()).get(root) != simdjson::SUCCESS ||
      root.type() != element_type::OBJECT) {
    return absl::InvalidArgumentError("the body is not a JSON object");
  }
  std::string out;
  out.reserve(body.size() + 16);
  std::string path;
  Copy(root, path, is_text, edit, out);
  return out;
}

// Every string a client wrote: message contents and parts, names, tool call arguments, tool
// descriptions, prompts, inputs, stop words, metadata ... all but the structural members.
bool RequestText(std::string_view p) { return !Structural(LastKey(p)); }

// Every string of an answer's choices but the structural members: contents and their parts,
// refusals, tool call arguments.
bool AnswerText(std::string_view p) {
  return p.starts_with(".choices[") && !Structural(LastKey(p));
}

// Strings of a chunk other than a delta's content and its fragmented texts (which the chunk
// edit and the held edit get): every one but the structural members, screened one by one.
bool ChunkText(std::string_view p) { return !Structural(LastKey(p)); }

// A delta's string `key` that an upstream streams in fragments: every one but the structural
// members and a function's name.
bool Fragmented(std::string_view key) { return !Structural(key) && key != "name"; }

// The members of a tool call's (or the legacy function_call's) function: fragmented strings
// through `held`, the rest copied (and screened through `other`).
void CopyFunction(object function, int64_t index, DeltaField field, std::string& path,
                  HeldEdit held, TextEdit other, std::string& out) {
  out.push_back('{');
  bool first = true;
  for (auto member : function) {
    if (!first) out.push_back(',');
    first = false;
    AppendJsonString(out, member.key);
    out.push_back(':');
    std::string_view fragment;
    if (Fragmented(member.key) && member.value.get(fragment) == simdjson::SUCCESS) {
      field.key = std::string(member.key);
      AppendJsonString(out, held(index, field, fragment));
      continue;
    }
    const size_t size = path.size();
    StrAppend(&path, ".", member.key);
    Copy(member.value, path, ChunkText, other, out);
    path.resize(size);
  }
  out.push_back('}');
}

// A delta's "tool_calls": each call's function through CopyFunction, keyed by the call's "index"
// (its position when it has none), the rest copied.
void CopyToolCalls(array calls, int64_t index, std::string& path, HeldEdit held, TextEdit other,
                   std::string& out) {
  out.push_back('[');
  int64_t position = 0;
  for (element call : calls) {
    if (position > 0) out.push_back(',');
    const size_t size = path.size();
    StrAppend(&path, "[", position, "]");
    object o;
    if (call.get(o) != simdjson::SUCCESS) {
      Copy(call, path, ChunkText, other, out);
      path.resize(size);
      ++position;
      continue;
    }
    DeltaField field{.place = DeltaField::Place::kToolCall, .call = position, .key = ""};
    if (int64_t i; o["index"].get(i) == simdjson::SUCCESS) field.call = i;
    out.push_back('{');
    bool first = true;
    for (auto member : o) {
      if (!first) out.push_back(',');
      first = false;
      AppendJsonString(out, member.key);
      out.push_back(':');
      const size_t at = path.size();
      StrAppend(&path, ".", member.key);
      object function;
      if (member.key == "function" && member.value.get(function) == simdjson::SUCCESS) {
        CopyFunction(function, index, field, path, held, other, out);
      } else {
        Copy(member.value, path, ChunkText, other, out);
      }
      path.resize(at);
    }
    out.push_back('}');
    path.resize(size);
    ++position;
  }
  out.push_back(']');
}

// A delta's members but its content: fragmented strings through `held`, tool calls and the
// legacy function call by their functions, the rest copied.
void CopyDeltaMember(std::string_view key, element value, int64_t index, int64_t position,
                     HeldEdit held, TextEdit other, std::string& out) {
  std::string path = StrCat(".choices[", position, "].delta.", key);
  std::string_view fragment;
  array calls;
  object function;
  if (Fragmented(key) && value.get(fragment) == simdjson::SUCCESS) {
    AppendJsonString(
        out,
        held(index,
             DeltaField{.place = DeltaField::Place::kDelta, .call = 0, .key = std::string(key)},
             fragment));
  } else if (key == "tool_calls" && value.get(calls) == simdjson::SUCCESS) {
    CopyToolCalls(calls, index, path, held, other, out);
  } else if (key == "function_call" && value.get(function) == simdjson::SUCCESS) {
    CopyFunction(function, index,
                 DeltaField{.place = DeltaField::Place::kFunctionCall, .call = 0, .key = ""}, path,
                 held, other, out);
  } else {
    Copy(value, path, ChunkText, other, out);
  }
}

// One choice of a chunk, its delta's (or its own) text replaced.
[[nodiscard]] absl::Status CopyChoice(object choice, int64_t position, ChunkEdit edit,
                                      HeldEdit held, TextEdit other, std::string& out) {
  int64_t index = position;
  if (int64_t i; choice["index"].get(i) == simdjson::SUCCESS) index = i;
  element finish;
  const bool finished =
      choice["finish_reason"].get(finish) == simdjson::SUCCESS && !finish.is_null();
  out.push_back('{');
  bool first = true;
  auto key = [&](std::string_view k) {
    if (!first) out.push_back(',');
    first = false;
    AppendJsonString(out, k);
    out.push_back(':');
  };
  for (auto field : choice) {
    std::string_view text;
    if (field.key == "text") {
      if (field.value.get(text) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError("a chunk's text is not a string");
      }
      key("text");
      AppendJsonString(out, edit(index, text, finished));
      continue;
    }
    object delta;
    key(field.key);
    if (field.key == "logprobs") {  // see Withheld()
      out.append("null");
      continue;
    }
    if (field.key != "delta" || field.value.get(delta) != simdjson::SUCCESS) {
      // Another member (a "message" some servers send in chunks, an extension): its strings
      // screened whole, as an answer's.
      std::string path = StrCat(".choices[", position, "].", field.key);
      Copy(field.value, path, ChunkText, other, out);
      continue;
    }
    out.push_back('{');
    bool delta_first = true;
    std::string_view content;
    bool has_content = false;
    for (auto member : delta) {
      if (member.key == "content") {
        if (member.value.is_null()) continue;
        if (member.value.get(content) != simdjson::SUCCESS) {
          return absl::InvalidArgumentError("a chunk's content is not a string");
        }
        has_content = true;
        continue;
      }
      if (!delta_first) out.push_back(',');
      delta_first = false;
      AppendJsonString(out, member.key);
      out.push_back(':');
      CopyDeltaMember(member.key, member.value, index, position, held, other, out);
    }
    const std::string replaced = edit(index, content, finished);
    if (has_content || !replaced.empty()) {
      if (!delta_first) out.push_back(',');
      out.append("\"content\":");
      AppendJsonString(out, replaced);
    }
    out.push_back('}');
  }
  out.push_back('}');
  return absl::OkStatus();
}

}  // namespace

[[nodiscard]] absl::StatusOr<std::string> EditRequestTexts(std::string_view body, TextEdit edit) {
  return Edit(body, RequestText, edit);
}

[[nodiscard]] absl::StatusOr<std::string> EditAnswerTexts(std::string_view body, TextEdit edit) {
  return Edit(body, AnswerText, edit);
}

[[nodiscard]] absl::StatusOr<std::string> EditChunkTexts(std::string_view data, ChunkEdit edit,
                                                         HeldEdit held, TextEdit other) {
  simdjson::dom::parser parser;
  element root;
  object top;
  if (parser.parse(data.data(), data.size()).get(root) != simdjson::SUCCESS ||
      root.get(top) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("a chunk of the stream is not a JSON object");
  }
  std::string out;
  out.reserve(data.size() + 16);
  out.push_back('{');
  bool first = true;
  for (auto field : top) {
    if (!first) out.push_back(',');
    first = false;
    AppendJsonString(out, field.key);
    out.push_back(':');
    array choices;
    if (field.key != "choices" || field.value.get(choices) != simdjson::SUCCESS) {
      std::string path = StrCat(".", field.key);
      Copy(field.value, path, ChunkText, other, out);
      continue;
    }
    out.push_back('[');
    int64_t position = 0;
    for (element choice : choices) {
      if (position > 0) out.push_back(',');
      object o;
      if (choice.get(o) == simdjson::SUCCESS) {
        if (absl::Status copied = CopyChoice(o, position, edit, held, other, out); !copied.ok()) {
          return copied;
        }
      } else {
        std::string path = StrCat(".choices[", position, "]");
        Copy(choice, path, ChunkText, other, out);
      }
      ++position;
    }
    out.push_back(']');
  }
  out.push_back('}');
  return out;
}

std::string DeltaChoice(int64_t index, const DeltaField& field, std::string_view text) {
  std::string out = StrCat("{\"index\":", index, ",\"delta\":{");
  std::string value;
  AppendJsonString(value, field.key);
  value.push_back(':');
  AppendJsonString(value, text);
  switch (field.place) {
    case DeltaField::Place::kDelta:
      out.append(value);
      break;
    case DeltaField::Place::kToolCall:
      StrAppend(&out, "\"tool_calls\":[{\"index\":", field.call, ",\"function\":{", value, "}}]");
      break;
    case DeltaField::Place::kFunctionCall:
      StrAppend(&out, "\"function_call\":{", value, "}");
      break;
  }
  out.append("},\"finish_reason\":null}");
  return out;
}

}  // namespace pillar::protocol
