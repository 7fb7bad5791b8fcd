#include "stages/whole_answer.h"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <vector>

#include "common/strings.h"
#include "guard/screen.h"
#include "protocol/openai_texts.h"

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
std::string AcrossTexts(std::string_view body, const guard::GuardConfig& config) {
  struct Text {
    int64_t choice;  // its position in "choices"
    int rank;
    size_t order;      // in the answer
    std::string text;  // a copy: the walk's views do not outlive it
  };
  std::vector<Text> texts;
  protocol::ForEachChoiceTextAt(body, [&](std::string_view path, std::string_view text) {
    int64_t choice = 0;  // "choices[N]...": the walk writes N as it found it, in digits
    const size_t open = path.find('[');
    if (open != std::string_view::npos) {
      std::from_chars(path.data() + open + 1, path.data() + path.size(), choice);
    }
    texts.push_back({choice, TextRank(path), texts.size(), std::string(text)});
  });
  if (texts.size() < 2) return std::string();
  auto screen = [&](const std::vector<Text>& in_order) -> std::string {
    // Choices are answers of their own: a line apart, as a client that prints them shows them
    // (joined without one, two short numbers made a card; review helper-75).
    std::string joined;
    for (size_t i = 0; i < in_order.size(); ++i) {
      if (i > 0 && in_order[i].choice != in_order[i - 1].choice) joined.push_back('\n');
      joined.append(in_order[i].text);
    }
    const guard::ScreenResult r = guard::Screen(joined, config);
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
  // The kinds a client may not know (the rest: LiteLLM's thinking_blocks) shown
  // above the others of their choice, as reasoning is (review helper-80).
  std::vector<Text> rest_first = by_kind;
  std::stable_sort(rest_first.begin(), rest_first.end(), [](const Text& a, const Text& b) {
    return a.choice != b.choice ? a.choice < b.choice : (a.rank == 5) > (b.rank == 5);
  });
  if (!std::equal(rest_first.begin(), rest_first.end(), by_kind.begin(),
                  [](const Text& a, const Text& b) { return a.order == b.order; })) {
    if (std::string why = screen(rest_first); !why.empty()) return why;
  }
  // And each kind of a choice after each earlier kind alone, the kinds between left out, as a
  // client that shows some kinds and not others does (review helper-79: content, a refusal a
  // tool-calling interface does not show, then arguments).
  for (size_t begin = 0; begin < by_kind.size();) {
    size_t end = begin;
    while (end < by_kind.size() && by_kind[end].choice == by_kind[begin].choice) ++end;
    std::array<std::string, 7> kinds;
    for (size_t i = begin; i < end; ++i) kinds[size_t(by_kind[i].rank)].append(by_kind[i].text);
    for (size_t first = 0; first < kinds.size(); ++first) {
      for (size_t second = 0; second < kinds.size() && !kinds[first].empty(); ++second) {
        if (second == first || second == first + 1 || kinds[second].empty()) continue;
        std::vector<Text> pair = {{0, 0, 0, kinds[first]}, {0, 1, 1, kinds[second]}};
        if (std::string why = screen(pair); !why.empty()) return why;
      }
    }
    begin = end;
  }
  return std::string();
}

}  // namespace pillar::stages
