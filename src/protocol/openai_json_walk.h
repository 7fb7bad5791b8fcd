// Internal to src/protocol: the walk over a request's, an answer's or a chunk's JSON that the
// guard's edits of OpenAI bodies share (openai_texts.h): each string (and number, and member name
// the API does not know) handed to an edit by its path (".messages[0].content"), the body copied
// minified with what the edit returned in its place.
//
//   std::string path, out;
//   Copy(root, path, {AnswerText, nullptr, true, edit}, out);
#pragma once

#include <simdjson.h>

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "protocol/openai_texts.h"

namespace pillar::protocol::internal {

// Whether `path` is `pattern`, where '#' in the pattern stands for an array index.
bool MatchPath(std::string_view path, std::string_view pattern);

// The last member name of a path (".a[0].b" -> "b"; an array item -> "").
std::string_view LastKey(std::string_view path);

// Members that hold names and codes, not text anyone wrote: never screened.
bool Structural(std::string_view key);

// Whether the OpenAI API names a member so (its requests, answers, chunks, and the JSON schemas
// tools declare): any other name is one a client or an upstream chose.
bool KnownName(std::string_view name);

// A member's name, `name`, of the object at `path`, as it goes out: one the API does not know
// goes through `edit` as the text at "a member's name in PATH" (a client sees names as it sees
// strings), and what replaces it, kept in `renamed`, renames the member.
std::string_view MemberName(std::string_view name, std::string_view path, TextEdit edit,
                            std::string& renamed);

using PathTest = bool (*)(std::string_view path);

// Numbers of fewer characters cannot spell any value the guard looks for alone.
inline constexpr size_t kShortestTextualNumber = 7;

// What of a body Copy hands to `edit`, which returns what replaces it, if anything.
struct Texts {
  PathTest is_text;  // the strings whose path passes
  PathTest numbers;  // and the numbers whose path passes this (none if null), read as their
                     // text (a replacement is written as a string): a number can spell a card
  bool names;        // and the member names the API does not know (MemberName)
  TextEdit edit;
  // Numbers shorter than this are not read as text (1: every one, for texts that are joined).
  size_t shortest_number = kShortestTextualNumber;
};

// Copies `e` to `out` minified, replacing what `texts` says; `path` is where `e` is (restored
// on return). An answer's log probabilities are withheld (null).
void Copy(simdjson::dom::element e, std::string& path, const Texts& texts, std::string& out);

// `body`, a JSON object, copied as Copy copies it; InvalidArgument when it is not one.
[[nodiscard]] absl::StatusOr<std::string> Edit(std::string_view body, const Texts& texts);

// Every string of an answer (and of a chunk, but its deltas' texts), the structural members
// too: a client shows an answer's names and codes as they come (its id, its model, a tool
// call's id), so a value there reaches it as well.
bool AnswerText(std::string_view path);

}  // namespace pillar::protocol::internal
