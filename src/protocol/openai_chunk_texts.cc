// The chunks of a streamed answer (openai_texts.h: EditChunkTexts, DeltaChoice): a delta's texts
// are held by where they are, since clients join them across chunks.
#include <simdjson.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/json_writer.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "protocol/number_text.h"
#include "protocol/openai_json_walk.h"
#include "protocol/openai_texts.h"

namespace pillar::protocol {
namespace {

using internal::AnswerText;
using internal::Copy;
using internal::MemberName;
using internal::Structural;
using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

// In a delta, a "url" is text a user sees (an annotation's link): not structural there.
bool AnswerStructural(std::string_view key) { return key != "url" && Structural(key); }

// A member of a delta's object at `path` that goes out in one piece: the structural ones, and a
// tool's name, which OpenAI, vLLM and llama.cpp send whole with its call's first delta and a
// client may take from there, adding only arguments after (held, it went out empty first and
// whole at the end: review helper-76).
bool DeltaStructural(std::string_view key, std::string_view path) {
  return AnswerStructural(key) ||
         (key == "name" && (path.ends_with(".function") || path.ends_with(".function_call")));
}

// The "index" of an element of a list that clients merge by it (a choice, a tool call): the
// position when it has none; nullopt when it is anything but one non-negative integer (a float,
// a string, a duplicate), which a client and the guard could read as different elements.
std::optional<int64_t> ElementIndex(object o, int64_t position) {
  std::optional<int64_t> index;
  for (auto member : o) {
    if (member.key != "index") continue;
    int64_t i;
    if (index || member.value.type() != element_type::INT64 ||
        member.value.get(i) != simdjson::SUCCESS || i < 0) {
      return std::nullopt;
    }
    index = i;
  }
  return index.value_or(position);
}

// How the guard takes a list in a delta across chunks: a list of objects is merged, its
// elements by their "index" (their position when they have none), their strings held and
// screened joined, since clients merge such lists by index (or by position) and join their
// strings as a delta's. Any other list (of strings, numbers, or mixed) is refused: clients
// extend it, or join it as text, in ways the guard cannot screen whole. Keying an element
// without an index by its position can join what a client keeps apart (a false positive), never
// the other way.
bool AllObjects(array a) {
  for (element e : a) {
    if (e.type() != element_type::OBJECT) return false;
  }
  return true;
}

// Whether `o` names a member twice: clients keep one (the last), so the guard must not read
// both. Sorted, not compared pairwise: an upstream's object may have a hundred thousand members.
bool HasDuplicateKeys(object o) {
  std::vector<std::string_view> keys;
  for (auto member : o) keys.push_back(member.key);
  if (keys.size() < 2) return false;
  std::sort(keys.begin(), keys.end());
  return std::adjacent_find(keys.begin(), keys.end()) != keys.end();
}

[[nodiscard]] absl::Status CopyHeld(element value, int64_t index, DeltaField& field,
                                    std::string& path, HeldEdit held, TextEdit other,
                                    std::string& out);

// A structural member `key` of an object in a delta: a string through `held` as structural (a
// guard checks it comes in one piece), or null. Anything else is refused: its strings would be
// screened chunk by chunk, where clients join them across chunks.
[[nodiscard]] absl::Status CopyStructural(std::string_view key, element value, int64_t index,
                                          DeltaField& field, HeldEdit held, std::string& out) {
  std::string_view text;
  if (value.is_null()) {
    out.append("null");
    return absl::OkStatus();
  }
  if (value.get(text) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(StrCat("a chunk's \"", key, "\" is not a string"));
  }
  field.path.push_back({std::string(key), -1});
  field.structural = true;
  AppendJsonString(out, held(index, field, text));
  field.structural = false;
  field.path.pop_back();
  return absl::OkStatus();
}

// The members of an object of a delta (the delta itself, or an object inside it): every string
// but the structural members through `held`, keyed by where it is (clients join the fragments
// of each across chunks), objects and merged lists likewise, the rest copied.
[[nodiscard]] absl::Status CopyHeldObject(object o, int64_t index, DeltaField& field,
                                          std::string& path, HeldEdit held, TextEdit other,
                                          std::string& out) {
  if (HasDuplicateKeys(o)) {
    return absl::InvalidArgumentError("a chunk's delta names a member twice");
  }
  // What the guard keeps per place grows with its depth; OpenAI's deltas are four deep.
  if (field.path.size() >= kMaxDeltaDepth) {
    return absl::InvalidArgumentError(
        StrCat("a chunk's delta nests deeper than ", kMaxDeltaDepth, " members"));
  }
  out.push_back('{');
  bool first = true;
  for (auto member : o) {
    if (!first) out.push_back(',');
    first = false;
    std::string renamed;
    const std::string_view name = MemberName(member.key, path, other, renamed);
    AppendJsonString(out, name);
    out.push_back(':');
    const size_t size = path.size();
    const bool structural = DeltaStructural(member.key, path);
    StrAppend(&path, ".", name);
    if (member.key == "index") {
      Copy(member.value, path, {AnswerText, AnswerText, true, other}, out);
    } else if (structural) {
      PILLAR_RETURN_IF_ERROR(CopyStructural(member.key, member.value, index, field, held, out));
    } else {
      field.path.push_back({std::string(name), -1});
      absl::Status copied = CopyHeld(member.value, index, field, path, held, other, out);
      field.path.pop_back();
      if (!copied.ok()) return copied;
    }
    path.resize(size);
  }
  out.push_back('}');
  return absl::OkStatus();
}

// A value at `field` of choice `index`'s delta.
[[nodiscard]] absl::Status CopyHeld(element value, int64_t index, DeltaField& field,
                                    std::string& path, HeldEdit held, TextEdit other,
                                    std::string& out) {
  std::string_view fragment;
  object o;
  array a;
  if (value.get(fragment) == simdjson::SUCCESS) {
    AppendJsonString(out, held(index, field, fragment));
    return absl::OkStatus();
  }
  if (value.get(o) == simdjson::SUCCESS) {
    // An object with an "index" is an element merged by it, sent without its list (TGI 2.x's
    // tool calls): held by that index as a list's element is, and written out so (DeltaChoice).
    const std::optional<int64_t> element = ElementIndex(o, -1);
    if (!element) {
      return absl::InvalidArgumentError(
          StrCat("a chunk's \"", field.path.back().key, "\" has an index that is not an integer"));
    }
    if (*element < 0) return CopyHeldObject(o, index, field, path, held, other, out);
    field.path.back().element = *element;
    field.path.back().bare = true;
    absl::Status copied = CopyHeldObject(o, index, field, path, held, other, out);
    field.path.back().element = -1;
    field.path.back().bare = false;
    return copied;
  }
  if (value.is_null()) {
    out.append("null");
    return absl::OkStatus();
  }
  if (value.get(a) != simdjson::SUCCESS) {
    // A number or a boolean: clients join these as text too (openai-node's refusal and
    // arguments), so it must come in one piece, like a structural member, and is screened so.
    field.structural = field.number = true;
    held(index, field, NumberText(value));
    field.structural = field.number = false;
    out.append(simdjson::minify(value));
    return absl::OkStatus();
  }
  if (a.size() == 0) {
    out.append("[]");
    return absl::OkStatus();
  }
  // A list of other values than objects, which clients extend or join as text, has no place in
  // a delta the guard could screen whole.
  if (!AllObjects(a)) {
    return absl::InvalidArgumentError(
        StrCat("a chunk's \"", field.path.back().key, "\" is a list of other values than objects"));
  }
  out.push_back('[');
  int64_t position = 0;
  std::set<int64_t> indices;
  for (element e : a) {
    if (position > 0) out.push_back(',');
    object element_object;
    if (e.get(element_object) != simdjson::SUCCESS) {  // AllObjects saw only objects
      return absl::InternalError("a merged list's element is not an object");
    }
    const std::optional<int64_t> element_index = ElementIndex(element_object, position);
    if (!element_index) {
      return absl::InvalidArgumentError(
          StrCat("a chunk's \"", field.path.back().key, "\" has an index that is not an integer"));
    }
    // openai-python keeps a list as it first sees it, by position: two elements of one index
    // would be two places to it and one to the guard.
    if (!indices.insert(*element_index).second) {
      return absl::InvalidArgumentError(StrCat("a chunk's \"", field.path.back().key,
                                               "\" has two elements of index ", *element_index));
    }
    field.path.back().element = *element_index;
    const size_t size = path.size();
    StrAppend(&path, "[", position, "]");
    PILLAR_RETURN_IF_ERROR(CopyHeldObject(element_object, index, field, path, held, other, out));
    path.resize(size);
    field.path.back().element = -1;
    ++position;
  }
  out.push_back(']');
  return absl::OkStatus();
}

// A choice's delta: its content through `edit`, every other string but the structural
// members through `held` (CopyHeld).
[[nodiscard]] absl::Status CopyDelta(object delta, int64_t index, int64_t position, bool finished,
                                     ChunkEdit edit, HeldEdit held, TextEdit other,
                                     std::string& out) {
  if (HasDuplicateKeys(delta)) {
    return absl::InvalidArgumentError("a chunk's delta names a member twice");
  }
  out.push_back('{');
  bool first = true;
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
    if (!first) out.push_back(',');
    first = false;
    std::string path = StrCat(".choices[", position, "].delta");
    std::string renamed;
    const std::string_view name = MemberName(member.key, path, other, renamed);
    AppendJsonString(out, name);
    out.push_back(':');
    StrAppend(&path, ".", name);
    DeltaField field;
    if (AnswerStructural(member.key)) {
      PILLAR_RETURN_IF_ERROR(CopyStructural(member.key, member.value, index, field, held, out));
      continue;
    }
    field.path.push_back({std::string(name), -1});
    PILLAR_RETURN_IF_ERROR(CopyHeld(member.value, index, field, path, held, other, out));
  }
  const std::string replaced = edit(index, content, finished);
  if (has_content || !replaced.empty()) {
    if (!first) out.push_back(',');
    out.append("\"content\":");
    AppendJsonString(out, replaced);
  }
  out.push_back('}');
  return absl::OkStatus();
}

// One choice of a chunk, its delta's (or its own) text replaced.
[[nodiscard]] absl::Status CopyChoice(object choice, int64_t position, ChunkRoute route,
                                      ChunkEdit edit, HeldEdit held, TextEdit other,
                                      std::string& out) {
  // A choice must say its index: a client that reads a missing one as 0 would join it to
  // choice 0, which the guard would not.
  element given;
  if (choice["index"].get(given) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("a chunk's choice has no index");
  }
  const std::optional<int64_t> read = ElementIndex(choice, position);
  if (!read) return absl::InvalidArgumentError("a chunk's choice index is not an integer");
  if (HasDuplicateKeys(choice)) {
    return absl::InvalidArgumentError("a chunk's choice names a member twice");
  }
  const int64_t index = *read;
  element finish;
  const bool finished =
      choice["finish_reason"].get(finish) == simdjson::SUCCESS && !finish.is_null();
  out.push_back('{');
  bool first = true;
  const std::string choice_path = StrCat(".choices[", position, "]");
  auto key = [&](std::string_view k) {
    if (!first) out.push_back(',');
    first = false;
    AppendJsonString(out, k);
    out.push_back(':');
  };
  for (auto field : choice) {
    std::string_view text;
    // A chat client reads a choice's delta, a completions client its text: the other one is
    // withheld (null), as the log probabilities are. Read as one text, both would go out cut
    // where the guard released each, and a client of either would see what it joined where
    // the guard saw something else (review helper-76).
    if ((field.key == "text" && route == ChunkRoute::kChat) ||
        (field.key == "delta" && route == ChunkRoute::kCompletions)) {
      key(field.key);
      out.append("null");
      continue;
    }
    if (field.key == "text") {
      if (field.value.get(text) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError("a chunk's text is not a string");
      }
      key("text");
      AppendJsonString(out, edit(index, text, finished));
      continue;
    }
    object delta;
    std::string renamed;
    const std::string_view name = MemberName(field.key, choice_path, other, renamed);
    key(name);
    if (field.key == "logprobs") {  // see Withheld()
      out.append("null");
      continue;
    }
    if (field.key == "message") {
      // Some servers repeat each chunk's text as a choice's "message" beside its delta
      // (text-generation-webui), where a client that adds them up would read, as it comes,
      // what the guard holds back of the delta's, and no screen sees whole: withheld, as the
      // log probabilities are (review helper-74 showed a key added up so).
      out.append("null");
      continue;
    }
    if (field.key != "delta" || field.value.get(delta) != simdjson::SUCCESS) {
      // Another member (a "message" some servers send in chunks, an extension): its strings
      // screened whole, as an answer's.
      std::string path = StrCat(choice_path, ".", name);
      Copy(field.value, path, {AnswerText, AnswerText, true, other}, out);
      continue;
    }
    PILLAR_RETURN_IF_ERROR(CopyDelta(delta, index, position, finished, edit, held, other, out));
  }
  out.push_back('}');
  return absl::OkStatus();
}

}  // namespace

[[nodiscard]] absl::StatusOr<std::string> EditChunkTexts(std::string_view data, ChunkRoute route,
                                                         ChunkEdit edit, HeldEdit held,
                                                         TextEdit other) {
  simdjson::dom::parser parser;
  element root;
  object top;
  if (parser.parse(data.data(), data.size()).get(root) != simdjson::SUCCESS ||
      root.get(top) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("a chunk of the stream is not a JSON object");
  }
  if (HasDuplicateKeys(top)) {
    return absl::InvalidArgumentError("a chunk of the stream names a member twice");
  }
  std::string out;
  out.reserve(data.size() + 16);
  out.push_back('{');
  bool first = true;
  for (auto field : top) {
    if (!first) out.push_back(',');
    first = false;
    std::string renamed;
    const std::string_view name = MemberName(field.key, "", other, renamed);
    AppendJsonString(out, name);
    out.push_back(':');
    array choices;
    if (field.key != "choices" || field.value.get(choices) != simdjson::SUCCESS) {
      std::string path = StrCat(".", name);
      Copy(field.value, path, {AnswerText, AnswerText, true, other}, out);
      continue;
    }
    out.push_back('[');
    int64_t position = 0;
    for (element choice : choices) {
      if (position > 0) out.push_back(',');
      object o;
      if (choice.get(o) == simdjson::SUCCESS) {
        if (absl::Status copied = CopyChoice(o, position, route, edit, held, other, out);
            !copied.ok()) {
          return copied;
        }
      } else {
        std::string path = StrCat(".choices[", position, "]");
        Copy(choice, path, {AnswerText, AnswerText, true, other}, out);
      }
      ++position;
    }
    out.push_back(']');
  }
  out.push_back('}');
  return out;
}

std::string DeltaChoice(int64_t index, const DeltaField& field, std::string_view text) {
  // From the innermost member out: "arguments":"..." in {"index":1,"function":{...}} in [...].
  std::string value;
  AppendJsonString(value, text);
  for (size_t i = field.path.size(); i-- > 0;) {
    const DeltaField::Segment& segment = field.path[i];
    std::string member;
    AppendJsonString(member, segment.key);
    member.push_back(':');
    if (segment.element >= 0) {
      const std::string element =
          StrCat("{\"index\":", segment.element, value.empty() ? "" : ",", value, "}");
      value = segment.bare ? StrCat(member, element) : StrCat(member, "[", element, "]");
    } else {
      value = StrCat(member, value);
    }
    // Every level but the innermost value is an object's member list.
    if (i > 0 && field.path[i - 1].element < 0) value = StrCat("{", value, "}");
  }
  return StrCat("{\"index\":", index, ",\"delta\":{", value, "},\"finish_reason\":null}");
}

}  // namespace pillar::protocol
