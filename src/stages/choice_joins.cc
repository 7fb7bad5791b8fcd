#include "stages/choice_joins.h"

#include <algorithm>
#include <array>

#include "common/strings.h"
#include "runtime/runner.h"

namespace pillar::stages {
namespace {

constexpr std::string_view kByKind = "shows them kind by kind";
constexpr std::string_view kAsTheyCome = "prints them as they come";

bool Blank(char c) { return guard::kBlankBytes.find(c) != std::string_view::npos; }
bool HasBlank(std::string_view text) {
  return text.find_first_of(guard::kBlankBytes) != std::string_view::npos;
}

}  // namespace

int ChoiceJoins::Rank(const protocol::DeltaField& field) {
  if (field.path.empty()) return 5;
  const std::string& first = field.path.front().key;
  if (first == "reasoning_content") return 0;
  if (first == "reasoning") return 1;
  if (first == "refusal") return 3;
  if ((first == "tool_calls" || first == "function_call") && field.path.back().key == "arguments") {
    return 4;
  }
  return 5;
}

void ChoiceJoins::ContentReleased(int64_t index, std::string_view text) {
  if (text.empty()) return;
  Content& content = content_[index];
  if (content.head.size() < kWindow) {
    content.head.append(text.substr(0, kWindow - content.head.size()));
  }
  content.tail.append(text);
  // Trimmed once past twice the window: each byte is moved a bounded number of times.
  if (content.tail.size() > 2 * kWindow) content.tail.erase(0, content.tail.size() - kWindow);
  content.total += text.size();
}

ChoiceJoins::Verdict ChoiceJoins::Shown(int64_t index, std::string_view text, int kind) {
  if (text.empty()) return {};
  ShownText& shown = shown_[index];
  if (shown.kind != kind && !shown.tail.empty()) {
    Verdict verdict =
        Join(index, {shown.tail, shown.total > shown.tail.size()}, {text, false}, kAsTheyCome);
    if (!verdict.ok()) return verdict;
  }
  shown.kind = kind;
  shown.tail.append(text);
  shown.total += text.size();
  if (shown.tail.size() > 2 * kShownTail) shown.tail.erase(0, shown.tail.size() - kShownTail);
  return {};
}

ChoiceJoins::Verdict ChoiceJoins::Finished(int64_t index, const std::vector<HeldOut>& held) {
  if (held.empty()) return {};
  std::array<std::string, kRanks> kinds;
  std::array<int, kRanks> counts{};
  for (const HeldOut& out : held) {
    const int rank = Rank(out.field);
    kinds[rank].append(out.sent);
    ++counts[rank];
  }
  const Content& content = content_[index];
  // A kind's start and end as a join screens them; content's were kept as it went out.
  auto start_of = [&](int rank) -> Side {
    if (rank == kContentRank) return {content.head, content.total > content.head.size()};
    return {kinds[rank], false};
  };
  auto end_of = [&](int rank) -> Side {
    if (rank == kContentRank) return {content.tail, content.total > content.tail.size()};
    return {kinds[rank], false};
  };
  // In order: each kind after the running end of all before it; a kind of several texts (two
  // calls' arguments) is screened so even first (review helper-78: a key in three texts).
  std::string before;
  size_t before_total = 0;
  for (int rank = 0; rank < kRanks; ++rank) {
    const Side next = start_of(rank);
    if (next.text.empty()) continue;
    if (!before.empty() || counts[rank] > 1) {
      Verdict verdict = Join(index, {before, before_total > before.size()}, next, kByKind);
      if (!verdict.ok()) return verdict;
    }
    const Side end = end_of(rank);
    before.append(end.text);
    before_total += rank == kContentRank ? content.total : end.text.size();
    if (before.size() > kWindow) before.erase(0, before.size() - kWindow);
  }
  // Each kind after each earlier one alone, the kinds between left out (review helper-79:
  // content, a refusal a tool-calling interface does not show, then arguments).
  for (int first = 0; first < kRanks; ++first) {
    Side end = end_of(first);
    if (end.text.empty()) continue;
    if (end.text.size() > kWindow) end = {end.text.substr(end.text.size() - kWindow), true};
    for (int second = first + 1; second < kRanks; ++second) {
      Side start = start_of(second);
      if (start.text.empty()) continue;
      if (start.text.size() > kWindow) start = {start.text.substr(0, kWindow), true};
      Verdict verdict = Join(index, end, start, kByKind);
      if (!verdict.ok()) return verdict;
    }
  }
  return {};
}

ChoiceJoins::Verdict ChoiceJoins::Join(int64_t index, Side before, Side after,
                                       std::string_view client) const {
  Verdict verdict;
  std::string joined(before.text);
  const size_t boundary = joined.size();
  joined.append(after.text);
  verdict.screen = guard::Screen(joined, config_);
  bool across = false;
  for (const guard::ScreenedFinding& f : verdict.screen.findings) {
    across = across || (f.action != guard::Action::kAllow && f.finding.end > boundary);
  }
  for (const guard::DenyMatch& m : verdict.screen.denied) {
    across = across || (m.rule->action == guard::DenyAction::kBlock && m.end > boundary);
  }
  if (across) {
    verdict.stop = absl::PermissionDeniedError(
        StrCat("the model's answer was blocked by the content guard: a value across the texts of "
               "the streamed choice ",
               index, ", as a client that ", client, " shows it"));
    return verdict;
  }
  verdict.screen = {};
  // A run without blanks across the point that fills a cut side was not screened whole.
  if (before.text.empty() || after.text.empty() || Blank(before.text.back()) ||
      Blank(after.text.front())) {
    return verdict;
  }
  if ((before.cut && !HasBlank(before.text)) || (after.cut && !HasBlank(after.text))) {
    verdict.stop = runtime::BadGateway(
        StrCat("the upstream's stream has a run without blanks longer than ", kWindow >> 10,
               " KiB across the texts of choice ", index,
               ", which the guard cannot screen whole as a client that ", client, " shows it"));
  }
  return verdict;
}

}  // namespace pillar::stages
