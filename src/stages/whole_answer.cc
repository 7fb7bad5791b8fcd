#include "stages/whole_answer.h"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <vector>

#include "common/strings.h"
#include "guard/display_controls.h"
#include "guard/json_escapes.h"
#include "guard/screen.h"
#include "protocol/number_text.h"
#include "protocol/openai_texts.h"
#include "stages/choice_joins.h"

namespace pillar::stages {
namespace {

// Whether `e`, or an object inside it, names a member twice: clients keep one copy (Python's,
// JavaScript's and Go's parsers the last), where the guard's walk reads every copy and its count
// of the choices the first (review helper-74: "choices":[],"choices":[...] passed both).
bool NamesAMemberTwice(simdjson::dom::element e) {
  if (simdjson::dom::array a; e.get(a) == simdjson::SUCCESS) {
    for (simdjson::dom::element item : a) {
      if (NamesAMemberTwice(item)) return true;
    }
    return false;
  }
  simdjson::dom::object o;
  if (e.get(o) != simdjson::SUCCESS) return false;
  std::vector<std::string_view> keys;
  for (auto member : o) {
    if (NamesAMemberTwice(member.value)) return true;
    keys.push_back(member.key);
  }
  std::sort(keys.begin(), keys.end());  // not pairwise: an object may have 100,000 members
  return std::adjacent_find(keys.begin(), keys.end()) != keys.end();
}

// The order in which a client that prints a choice's texts one kind after another shows them:
// its reasoning (a reasoning model's interface shows it first), its content (or a completion's
// text), its refusal, its tool calls' arguments, the rest, the tools' names.
int TextRank(std::string_view path) {
  const size_t after = path.find("].");  // past "choices[N]"
  const std::string_view rest = after == std::string_view::npos ? path : path.substr(after + 2);
  if (rest.starts_with("message.reasoning_content")) return 0;
  if (rest.starts_with("message.reasoning")) return 1;  // a client reads one or the other
  if (rest.starts_with("message.content") || rest.starts_with("text")) return 2;
  if (rest.starts_with("message.refusal")) return 3;
  if (rest.starts_with("message.tool_calls") || rest.starts_with("message.function_call")) {
    if (rest.ends_with(".arguments")) return 4;
    // A tool's name, a kind of its own: a client may show it between the answer and the
    // arguments, or not at all (review helper-80). Each call's name and arguments are also
    // read together as written, with the answer's other texts in order.
    if (rest.ends_with(".name")) return 6;
  }
  return 5;  // an audio's transcript, an extension's strings, a tool call's id
}

// Where a text of a whole answer's choice is, as a delta would place it: "message." and the
// choice taken off, each "key[k]" an element of a list ("message.tool_calls[1].function.name":
// tool_calls element 1, function, name).
protocol::DeltaField FieldAt(std::string_view path) {
  if (path.starts_with("message.")) path.remove_prefix(8);
  protocol::DeltaField field;
  while (!path.empty()) {
    const size_t dot = path.find('.');
    std::string_view part = path.substr(0, dot);
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
    int64_t element = -1;
    if (const size_t open = part.find('['); open != std::string_view::npos) {
      std::from_chars(part.data() + open + 1, part.data() + part.size(), element);
      part = part.substr(0, open);
    }
    field.path.push_back({std::string(part), element});
  }
  return field;
}

// How deep a parsed text's values are read (simdjson's own limit is deeper than clients go).
constexpr int kMaxDepth = 1024;
// What parts a parsed text's values: a line, and a mark no recognizer reads across (review
// helper-86: [4500,1250,3000,2200] one per line read as a card).
constexpr std::string_view kApart = "\n;\n";

// The values of `e` as a client that parses it reads them, each on a line (ParsedFinding); a
// string that is itself a JSON object or list is read so too (a tool runner parses it again).
void AppendValues(simdjson::dom::element e, std::string& out, int depth);

// `text`'s values if it is a JSON object or list (AppendValues); if a strict parser refuses it
// (an integer too large, NaN, a lone surrogate: clients read those), each number outside its
// strings as JavaScript prints it (review helper-85). False when `text` is no such text.
bool AppendParsed(std::string_view text, std::string& out, int depth) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return false;
  const char c = text[first];
  // A bare string or number is JSON too, which clients parse as they do an object (review
  // helper-88: "4.111111111111111e15" as the whole content or arguments); read only when it is
  // that, whole, so that prose that begins with a digit or a quote is not.
  const bool container = c == '{' || c == '[';
  if (!container && c != '"' && c != '-' && !(c >= '0' && c <= '9')) return false;
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(text.data(), text.size()).get(root) == simdjson::SUCCESS) {
    AppendValues(root, out, depth);
    return true;
  }
  if (!container) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      // A string: itself JSON is read so too (review helper-86: NaN beside a string of JSON).
      size_t end = i + 1;
      while (end < text.size() && text[end] != '"') end += text[end] == '\\' ? 2 : 1;
      // Read as the value it is too (review helper-87: a redacted copy in a string stood for
      // a card written as a number beside an integer too large).
      const std::string value =
          guard::JsonDecoded(text.substr(i + 1, std::min(end, text.size()) - i - 1));
      StrAppend(&out, value, kApart);
      if (depth < kMaxDepth) (void)AppendParsed(value, out, depth + 1);
      i = end;
      continue;
    }
    if (!(c == '-' || (c >= '0' && c <= '9'))) continue;
    size_t end = i + 1;
    while (end < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.' ||
            text[end] == 'e' || text[end] == 'E' || text[end] == '+' || text[end] == '-')) {
      ++end;
    }
    const std::string token(text.substr(i, end - i));
    StrAppend(&out, token, kApart);
    simdjson::dom::parser number_parser;
    simdjson::dom::element number;
    if (number_parser.parse(token).get(number) == simdjson::SUCCESS) {
      StrAppend(&out, protocol::NumberText(number), kApart);
    } else if (const double d = std::strtod(token.c_str(), nullptr); std::isfinite(d)) {
      char buffer[64];
      const std::to_chars_result r = std::to_chars(buffer, buffer + sizeof(buffer), d);
      if (r.ec == std::errc()) StrAppend(&out, std::string_view(buffer, r.ptr), kApart);
    }
    i = end - 1;
  }
  return true;
}

void AppendValues(simdjson::dom::element e, std::string& out, int depth) {
  if (depth > kMaxDepth) return;
  switch (e.type()) {
    case simdjson::dom::element_type::OBJECT:
      for (simdjson::dom::key_value_pair member : simdjson::dom::object(e)) {
        StrAppend(&out, std::string_view(member.key), kApart);
        AppendValues(member.value, out, depth + 1);
      }
      return;
    case simdjson::dom::element_type::ARRAY:
      for (simdjson::dom::element item : simdjson::dom::array(e))
        AppendValues(item, out, depth + 1);
      return;
    case simdjson::dom::element_type::STRING: {
      const std::string_view value(e);
      StrAppend(&out, value, kApart);
      if (depth < kMaxDepth) (void)AppendParsed(value, out, depth + 1);
      return;
    }
    case simdjson::dom::element_type::INT64:
    case simdjson::dom::element_type::UINT64:
    case simdjson::dom::element_type::DOUBLE:
      StrAppend(&out, protocol::NumberText(e), kApart);
      return;
    default:
      return;
  }
}
}  // namespace

// See whole_answer.h.
std::string AnswerShapeError(std::string_view body, int64_t asked) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(body.data(), body.size()).get(root) != simdjson::SUCCESS) {
    return std::string();  // EditAnswerTexts says why
  }
  if (NamesAMemberTwice(root)) return "the upstream's answer names a member twice";
  simdjson::dom::array choices;
  if (root["choices"].get(choices) != simdjson::SUCCESS) return std::string();
  if (int64_t(choices.size()) > asked) {
    return StrCat("the upstream's answer has ", choices.size(), " choices; the request asked for ",
                  asked);
  }
  int64_t position = 0;
  for (simdjson::dom::element choice : choices) {
    int64_t index = position;
    if (simdjson::dom::element i; choice["index"].get(i) == simdjson::SUCCESS &&
                                  (i.get(index) != simdjson::SUCCESS || index != position)) {
      return "the upstream's answer lists its choices out of the order of their index";
    }
    ++position;
  }
  return std::string();
}

// See whole_answer.h.
[[nodiscard]] absl::StatusOr<std::string> AcrossTexts(std::string_view body,
                                                      const guard::GuardConfig& config) {
  struct Text {
    int64_t choice;  // its position in "choices"
    int rank;
    size_t order;      // in the answer
    std::string path;  // after "choices[N]."
    std::string text;  // a copy: the walk's views do not outlive it
  };
  std::vector<Text> texts;
  protocol::ForEachChoiceTextAt(body, [&](std::string_view path, std::string_view text) {
    int64_t choice = 0;  // "choices[N]...": the walk writes N as it found it, in digits
    const size_t open = path.find('[');
    if (open != std::string_view::npos) {
      std::from_chars(path.data() + open + 1, path.data() + path.size(), choice);
    }
    const size_t after = path.find("].");
    const std::string_view within = after == std::string_view::npos ? "" : path.substr(after + 2);
    texts.push_back({choice, TextRank(path), texts.size(), std::string(within), std::string(text)});
  });
  if (texts.size() < 2) return std::string();
  auto reason = [](const guard::ScreenResult& r) -> std::string {
    for (const guard::ScreenedFinding& f : r.findings) {
      if (f.action != guard::Action::kAllow) {
        return StrCat(guard::EntityName(f.finding.type), " across the texts of the answer");
      }
    }
    for (const guard::DenyMatch& m : r.denied) {
      if (m.rule->action == guard::DenyAction::kBlock) {
        return StrCat("deny rule '", m.rule->name, "' across the texts of the answer");
      }
    }
    return std::string();
  };
  auto screen = [&](const std::vector<Text>& in_order) -> std::string {
    // Choices are answers of their own: a line apart, as a client that prints them shows them
    // (joined without one, two short numbers made a card; review helper-75).
    std::string joined;
    for (size_t i = 0; i < in_order.size(); ++i) {
      if (i > 0 && in_order[i].choice != in_order[i - 1].choice) joined.push_back('\n');
      joined.append(in_order[i].text);
    }
    return reason(guard::Screen(joined, config));
  };
  if (std::string why = screen(texts); !why.empty()) return why;
  // The choices come in the order of their index (AnswerShapeError); within each, by kind.
  std::vector<Text> by_kind = texts;
  std::stable_sort(by_kind.begin(), by_kind.end(), [](const Text& a, const Text& b) {
    return a.choice != b.choice ? a.choice < b.choice : a.rank < b.rank;
  });
  const bool reordered =
      !std::equal(texts.begin(), texts.end(), by_kind.begin(),
                  [](const Text& a, const Text& b) { return a.order == b.order; });
  if (reordered) {
    if (std::string why = screen(by_kind); !why.empty()) return why;
  }
  // And each choice's texts as a streamed choice's are read when it finishes (ChoiceJoins): in
  // the orders clients show kinds in, any two in either order, any three with a short middle,
  // tool calls with and without their names and ids, each side of a join windowed (review
  // helper-81: whole answers read fewer orders than streams, and each pair of kinds whole).
  for (size_t begin = 0; begin < by_kind.size();) {
    size_t end = begin;
    while (end < by_kind.size() && by_kind[end].choice == by_kind[begin].choice) ++end;
    std::vector<ChoiceJoins::HeldOut> held;
    for (size_t i = begin; i < end; ++i) {
      held.push_back({FieldAt(by_kind[i].path), by_kind[i].text});
    }
    ChoiceJoins joins(config);
    ChoiceJoins::Verdict verdict = joins.Finished(by_kind[begin].choice, held);
    if (!verdict.ok()) {
      if (!absl::IsPermissionDenied(verdict.stop)) return verdict.stop;
      std::string why = reason(verdict.screen);
      return why.empty() ? std::string("a value across the texts of the answer") : why;
    }
    begin = end;
  }
  return std::string();
}

// See whole_answer.h.
std::string ParsedFinding(std::string_view text, const guard::GuardConfig& config) {
  std::string reading;
  if (!AppendParsed(text, reading, 0)) return std::string();
  // What strip mode took out of the text as written, a client that parses it must not get back
  // through an escape (review helper-87: {"k":"XX\u00adAKIA..."} is a key after a terminal's
  // '-', {"k":"\u202e..."} one a page shows reversed): ShownParsed took the escapes out, so only
  // one spelled deeper (in a string of JSON inside a string) is left here.
  if (config.strip_answer_controls && guard::HasLayoutControls(reading)) {
    return std::string(kDisplayControl);
  }
  // The values the text shows as it is and still shows decoded (a raw copy that an escape after
  // it changes is none: review helper-86).
  std::string decoded(text);
  for (int level = 0; level < guard::kMaxJsonLevels && guard::MayHaveJsonEscapes(decoded);
       ++level) {
    decoded = guard::JsonDecoded(decoded);
  }
  return guard::NewValue(reading, guard::ValuesFound(decoded, config), config);
}

// See whole_answer.h.
namespace {

// Where the first byte at or after `at` that is not a blank to JavaScript's trim() is: ASCII
// blanks, and U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000, U+FEFF.
// npos when the text ends first, or within a character that may be one.
size_t PastJsBlanks(std::string_view text, size_t at) {
  while (at < text.size()) {
    const auto byte = static_cast<unsigned char>(text[at]);
    if (byte == ' ' || (byte >= '\t' && byte <= '\r')) {
      ++at;
      continue;
    }
    if (byte < 0xC2) return at;
    const size_t length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : 2;
    if (at + length > text.size()) return std::string_view::npos;
    uint32_t c = byte & (0x7F >> length);
    for (size_t k = 1; k < length; ++k)
      c = c << 6 | (static_cast<unsigned char>(text[at + k]) & 0x3F);
    const bool blank = c == 0x00A0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
                       c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
    if (!blank) return at;
    at += length;
  }
  return std::string_view::npos;
}

}  // namespace

std::optional<bool> OpensJson(std::string_view text) {
  // As the most lenient client reads it (review helper-91): openai-node's streaming helper
  // trims what JavaScript's trim() does and reads NaN and Infinity, as Python's json does.
  const size_t first = PastJsBlanks(text, 0);
  if (first == std::string_view::npos) return std::nullopt;
  if (text[first] == '{' || text[first] == '"') return true;
  if (text[first] != '[') return false;
  // A list opens with a value or ends; a Markdown link or a citation ("[Note]", "[see") with a
  // word that is none of JSON's.
  const size_t second = PastJsBlanks(text, first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  const char c = text[second];
  if (c == '{' || c == '[' || c == '"' || c == ']' || c == '-' || (c >= '0' && c <= '9')) {
    return true;
  }
  const std::string_view rest = text.substr(second);
  for (const std::string_view word : {"null", "true", "false", "NaN", "Infinity"}) {
    if (rest.starts_with(word)) return true;
    if (word.starts_with(rest)) return std::nullopt;  // it may still become one
  }
  return false;
}

// See whole_answer.h.
std::string_view ShownParsed(std::string_view text, std::string& storage,
                             const guard::GuardConfig& config) {
  if (!config.strip_answer_controls || !OpensJson(text).value_or(false)) return text;
  return guard::WithoutEscapedDisplayControls(text, storage);
}

// See whole_answer.h.
std::string DecodedFinding(std::string_view text, const guard::GuardConfig& config) {
  if (std::string escaped = guard::EscapedFinding(text, config); !escaped.empty()) {
    return StrCat(escaped, " spelled with JSON escapes");
  }
  if (std::string parsed = ParsedFinding(text, config); !parsed.empty()) {
    if (parsed == kDisplayControl) return StrCat(parsed, " spelled with a JSON escape");
    return StrCat(parsed, " as a client that parses the JSON reads it");
  }
  return std::string();
}

}  // namespace pillar::stages
