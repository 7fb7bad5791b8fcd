#include "stages/choice_joins.h"

#include <algorithm>
#include <array>
#include <tuple>

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
  if (field.path.empty()) return kRestRank;
  const std::string& first = field.path.front().key;
  if (first == "reasoning_content") return 0;
  if (first == "reasoning") return 1;
  if (first == "refusal") return 3;
  if (first == "tool_calls" || first == "function_call") {
    const std::string& last = field.path.back().key;
    if (last == "arguments") return kArgumentsRank;
    if (last == "name") return kToolNameRank;
  }
  return kRestRank;
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

ChoiceJoins::Verdict ChoiceJoins::Shown(int64_t index, const std::vector<ShownText>& texts) {
  Printed& shown = shown_[index];
  // The texts from the first whose kind differs from what was shown last: what comes before it
  // continues the text shown, which its own screen saw.
  size_t first = 0;
  while (first < texts.size() && (texts[first].text.empty() || texts[first].kind == shown.kind)) {
    ++first;
  }
  std::string after;
  for (size_t i = first; i < texts.size(); ++i) after.append(texts[i].text);
  if (!after.empty() && !shown.tail.empty()) {
    Verdict verdict =
        Join(index, {shown.tail, shown.total > shown.tail.size()}, {after, false}, kAsTheyCome);
    if (!verdict.ok()) return verdict;
  }
  for (const ShownText& text : texts) {
    if (text.text.empty()) continue;
    shown.kind = text.kind;
    shown.tail.append(text.text);
    shown.total += text.text.size();
    // Trimmed once 1 KiB past the bound: each byte is moved a bounded number of times.
    if (shown.tail.size() > kShownTail + 1024) shown.tail.erase(0, shown.tail.size() - kShownTail);
  }
  return {};
}

ChoiceJoins::Verdict ChoiceJoins::Structural(int64_t index, const protocol::DeltaField& field,
                                             std::string_view value) {
  if (value.empty() || field.path.empty()) return {};
  const std::string& key = field.path.back().key;
  if (!field.number && (key == "role" || key == "type")) return {};
  Verdict verdict = Shown(index, value, kStructural);
  if (verdict.ok()) kept_[index].push_back({field, std::string(value)});
  return verdict;
}

ChoiceJoins::Kinds ChoiceJoins::KindsOf(int64_t index, const std::vector<HeldOut>& held) const {
  // The texts by kind. Tool calls twice: their arguments alone (a client that shows a call's
  // arguments after the answer), and call by call, each one's name before its arguments (one
  // that shows the name too: review helper-80, content ending "the key is AKIAIOSF" and a tool
  // named "ODNN7EXAMPLE").
  struct Placed {
    int rank;
    int64_t call;  // the tool call's index (tool calls only)
    std::string_view text;
  };
  std::vector<Placed> texts;
  auto take = [&](const HeldOut& out) {
    const int rank = Rank(out.field);
    const bool tool = rank == kArgumentsRank || rank == kToolNameRank;
    texts.push_back({rank, tool ? out.field.path.front().element : 0, out.sent});
  };
  for (const HeldOut& out : held) take(out);
  if (auto kept = kept_.find(index); kept != kept_.end()) {
    for (const HeldOut& out : kept->second) take(out);
  }
  auto order = [](const Placed& p) {
    const bool tool = p.rank == kArgumentsRank || p.rank == kToolNameRank;
    return std::make_tuple(tool ? kArgumentsRank : p.rank, p.call, p.rank == kArgumentsRank);
  };
  std::stable_sort(texts.begin(), texts.end(),
                   [&](const Placed& a, const Placed& b) { return order(a) < order(b); });
  Kinds kinds;
  for (const Placed& text : texts) {
    if (text.rank == kArgumentsRank || text.rank == kToolNameRank) {
      kinds.texts[kToolCallsRank].append(text.text);
      ++kinds.counts[kToolCallsRank];
    }
    if (text.rank == kToolNameRank) continue;  // in the calls' kind only
    kinds.texts[text.rank].append(text.text);
    ++kinds.counts[text.rank];
  }
  return kinds;
}

ChoiceJoins::Verdict ChoiceJoins::Finished(int64_t index, const std::vector<HeldOut>& held) {
  if (held.empty() && !kept_.contains(index)) return {};
  const Kinds kinds_of = KindsOf(index, held);
  const std::array<std::string, kRanks>& kinds = kinds_of.texts;
  const std::array<int, kRanks>& counts = kinds_of.counts;
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
  for (const int calls : {kArgumentsRank, kToolCallsRank}) {
    if (calls == kToolCallsRank && counts[kToolCallsRank] == counts[kArgumentsRank]) break;
    std::string before;
    size_t before_total = 0;
    for (const int rank : {kRestRank, 0, 1, kContentRank, 3, calls, kRestRank}) {
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
  }
  // Each kind before and after each other one alone, the kinds between left out (review
  // helper-79: content, a refusal a tool-calling interface does not show, then arguments).
  for (int first = 0; first < kRanks; ++first) {
    Side end = end_of(first);
    if (end.text.empty()) continue;
    if (end.text.size() > kWindow) end = {end.text.substr(end.text.size() - kWindow), true};
    for (int second = 0; second < kRanks; ++second) {
      // The calls' arguments are in both of their kinds.
      if (second == first || (first >= kArgumentsRank && second >= kArgumentsRank &&
                              first != kRestRank && second != kRestRank)) {
        continue;
      }
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
  bool before_only = false;  // a finding within what came before, as joined
  for (const guard::ScreenedFinding& f : verdict.screen.findings) {
    if (f.action == guard::Action::kAllow) continue;
    across = across || f.finding.end > boundary;
    before_only = before_only || f.finding.end <= boundary;
  }
  // One within what came before that it did not have alone was made by what follows: a naming
  // word after a number ("4155552671" and then " is my phone": review helper-80).
  if (!across && before_only) {
    const guard::ScreenResult alone = guard::Screen(before.text, config_);
    for (const guard::ScreenedFinding& f : verdict.screen.findings) {
      if (f.action == guard::Action::kAllow || f.finding.end > boundary) continue;
      across = across || std::none_of(alone.findings.begin(), alone.findings.end(),
                                      [&](const guard::ScreenedFinding& a) {
                                        return a.finding.type == f.finding.type &&
                                               a.finding.begin == f.finding.begin &&
                                               a.finding.end == f.finding.end &&
                                               a.action != guard::Action::kAllow;
                                      });
    }
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
