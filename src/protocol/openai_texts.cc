#include "protocol/openai_texts.h"

#include <optional>
#include <string>

#include "common/strings.h"
#include "protocol/openai_json_walk.h"

namespace pillar::protocol {
namespace {

using internal::AnswerText;
using internal::Edit;
using internal::LastKey;
using internal::MatchPath;
using internal::Structural;

// Every string a client wrote: message contents and parts, names, tool call arguments and ids,
// tool descriptions, prompts, inputs, stop words, metadata, URLs ... all but the model, which
// names what pillar serves, and each message's role, which is one of six words
// (openai_request.h). A model may read any of the others: a chat template writes a tool call's
// id into the prompt, and an upstream fetches an image's URL.
bool RequestText(std::string_view p) { return p != ".model" && !MatchPath(p, ".messages[#].role"); }

// The numbers a client wrote as data: every one but the generation parameters the API knows at
// the top level. A seed or a token budget is no one's personal data (and a large seed can pass
// Luhn); a number anywhere else (a tool's result, metadata, a member of the client's own) can
// carry a card to the model.
bool RequestNumber(std::string_view p) {
  static constexpr std::string_view kParameters[] = {".seed",
                                                     ".max_tokens",
                                                     ".max_completion_tokens",
                                                     ".temperature",
                                                     ".top_p",
                                                     ".n",
                                                     ".best_of",
                                                     ".presence_penalty",
                                                     ".frequency_penalty",
                                                     ".logprobs",
                                                     ".top_logprobs",
                                                     ".dimensions",
                                                     ".top_k",
                                                     ".min_p",
                                                     ".repetition_penalty"};
  for (std::string_view parameter : kParameters) {
    if (p == parameter) return false;
  }
  return RequestText(p);
}

// The numbers of an answer but an embedding's vector: its values can encode anything (no screen
// could tell), and reading thousands of floats as text would cost more than the call.
bool AnswerNumber(std::string_view p) { return !MatchPath(p, ".data[#].embedding[#]"); }

// The texts of an answer's choices that a model wrote: its strings but the structural members.
bool ChoiceText(std::string_view p) {
  return p.starts_with(".choices[") && !Structural(LastKey(p));
}

// And its numbers but the choices' and the list elements' indices: clients print a number where
// a text was (a refusal of 1111 reads "1111": review helper-80).
bool ChoiceNumber(std::string_view p) { return ChoiceText(p) && LastKey(p) != "index"; }

}  // namespace

[[nodiscard]] absl::StatusOr<std::string> EditRequestTexts(std::string_view body, TextEdit edit) {
  return Edit(body, {RequestText, RequestNumber, true, edit});
}

[[nodiscard]] absl::StatusOr<std::string> EditAnswerTexts(std::string_view body, TextEdit edit) {
  return Edit(body, {AnswerText, AnswerNumber, true, edit});
}

void ForEachRequestText(
    std::string_view body,
    absl::FunctionRef<void(std::string_view where, std::string_view text)> each) {
  (void)Edit(body,
             {RequestText, nullptr, false,
              [&](std::string_view where, std::string_view text) -> std::optional<std::string> {
                each(where, text);
                return std::nullopt;
              }});
}

bool IsLink(std::string_view where) {
  // Any member on the way names a link: an image_url given as a list or an object of its own.
  std::string_view previous;
  for (size_t at = 0; at < where.size();) {
    size_t end = where.find_first_of(".[]", at);
    if (end == std::string_view::npos) end = where.size();
    const std::string_view name = where.substr(at, end - at);
    for (std::string_view key : {"url", "uri", "file_url", "image_url", "file_data"}) {
      if (EqualsIgnoreCase(name, key)) return true;
    }
    if (name == "data" && previous == "input_audio") return true;  // a sound's bytes
    if (!name.empty()) previous = name;
    at = end + 1;
  }
  return false;
}

bool IsAttachment(std::string_view where) {
  for (std::string_view shape :
       {"messages[#].content[#].image_url.url", "messages[#].content[#].image_url",
        "messages[#].content[#].file.file_data", "messages[#].content[#].file.file_url",
        "messages[#].content[#].input_audio.data"}) {
    if (MatchPath(where, shape)) return true;
  }
  return false;
}

void ForEachChoiceText(std::string_view body, absl::FunctionRef<void(std::string_view)> each) {
  ForEachChoiceTextAt(body, [&](std::string_view, std::string_view text) { each(text); });
}

void ForEachChoiceTextAt(
    std::string_view body,
    absl::FunctionRef<void(std::string_view path, std::string_view text)> each) {
  (void)Edit(body,
             {ChoiceText, ChoiceNumber, false,
              [&](std::string_view path, std::string_view text) -> std::optional<std::string> {
                each(path, text);
                return std::nullopt;
              },
              /*shortest_number=*/1});
}

}  // namespace pillar::protocol
