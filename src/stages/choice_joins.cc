#include "stages/choice_joins.h"

#include <algorithm>
#include <array>
#include <tuple>

#include "common/strings.h"
#include "runtime/runner.h"

namespace pillar::stages {
namespace {

ChoiceJoins::Verdict Refused(absl::Status status) {
  ChoiceJoins::Verdict verdict;
  verdict.stop = std::move(status);
  return verdict;
}

constexpr std::string_view kByKind = "shows them kind by kind";
constexpr std::string_view kAsTheyCome = "prints them as they come";

// The bytes of a credential that is one long token: a JWT's (base64url and '.'), an API key's,
// a base64 blob's. A run of them crossing the point two texts meet can be a value longer than
// the window; other runs without blanks (minified JSON: quotes, colons, commas, brackets) are
// not one (review helper-81: a tool call's 5.8 KB of compact arguments was refused).
bool TokenByte(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == '+' || c == '/' || c == '=';
}
bool AllTokenBytes(std::string_view text) {
  return std::all_of(text.begin(), text.end(), TokenByte);
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
    return last == "arguments" ? kArgumentsRank : kToolMemberRank;
  }
  if (first == "content" || first == "text") return kContentRank;  // a whole answer's
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
  // A tool call's id names the call for the client's code, which does not show it.
  const std::string& first = field.path.front().key;
  if (!field.number && key == "id" && (first == "tool_calls" || first == "function_call")) {
    return {};
  }
  // Each a kind of its own: two in a row are joined too (review helper-81: a call's id
  // "call_AKIAIOSF" and its name "ODNN7EXAMPLE", printed one after the other).
  Verdict verdict = Shown(index, value, --structural_serial_);
  if (verdict.ok()) kept_[index].push_back({field, std::string(value)});
  return verdict;
}

ChoiceJoins::Kinds ChoiceJoins::KindsOf(int64_t index, const std::vector<HeldOut>& held) const {
  // The texts by kind. Tool calls twice: their arguments alone (a client that shows a call's
  // arguments after the answer), and call by call, each one's other members (its name, its id)
  // before its arguments (one that shows them too: review helper-80, content ending "the key
  // is AKIAIOSF" and a tool named "ODNN7EXAMPLE"; helper-81, an id and a name).
  struct Placed {
    int rank;
    int64_t call;  // the tool call's index (tool calls only)
    std::string_view text;
    const protocol::DeltaField* field;
  };
  std::vector<Placed> texts;
  auto take = [&](const HeldOut& out) {
    if (out.sent.empty()) return;
    const int rank = Rank(out.field);
    const bool tool = rank == kArgumentsRank || rank == kToolMemberRank;
    texts.push_back({rank, tool ? out.field.path.front().element : 0, out.sent, &out.field});
  };
  for (const HeldOut& out : held) take(out);
  if (auto kept = kept_.find(index); kept != kept_.end()) {
    for (const HeldOut& out : kept->second) take(out);
  }
  auto order = [](const Placed& p) {
    const bool tool = p.rank == kArgumentsRank || p.rank == kToolMemberRank;
    return std::make_tuple(tool ? kArgumentsRank : p.rank, p.call, p.rank == kArgumentsRank);
  };
  std::stable_sort(texts.begin(), texts.end(),
                   [&](const Placed& a, const Placed& b) { return order(a) < order(b); });
  Kinds kinds;
  for (const Placed& text : texts) {
    if (text.rank == kArgumentsRank || text.rank == kToolMemberRank) {
      kinds.texts[kToolCallsRank].append(text.text);
      ++kinds.counts[kToolCallsRank];
    }
    if (text.rank == kToolMemberRank) {  // in the calls' kind, and each name on its own
      if (std::find(kinds.names.begin(), kinds.names.end(), text.text) == kinds.names.end()) {
        kinds.names.push_back(text.text);
      }
      continue;
    }
    kinds.texts[text.rank].append(text.text);
    ++kinds.counts[text.rank];
    if (text.rank != kRestRank) continue;
    // The rest by member, its lists' elements in order: a client shows a member of each
    // element one after the other (every reasoning_details[].text, not their formats: review
    // helper-82, a key in four elements' texts).
    std::string member;
    for (const protocol::DeltaField::Segment& segment : text.field->path) {
      StrAppend(&member, member.empty() ? "" : ".", segment.key);
    }
    auto group = std::find_if(kinds.rest.begin(), kinds.rest.end(),
                              [&](const RestText& r) { return r.member == member; });
    if (group == kinds.rest.end()) group = kinds.rest.insert(kinds.rest.end(), {member, {}});
    group->text.append(text.text);
  }
  return kinds;
}

ChoiceJoins::Side ChoiceJoins::Reading::StartOf(int rank) const {
  if (rank == kContentRank && content != nullptr) {
    return {content->head, content->total > content->head.size()};
  }
  return {kinds.texts[rank], false};
}

ChoiceJoins::Side ChoiceJoins::Reading::EndOf(int rank) const {
  if (rank == kContentRank && content != nullptr) {
    return {content->tail, content->total > content->tail.size()};
  }
  return {kinds.texts[rank], false};
}

ChoiceJoins::Verdict ChoiceJoins::Finished(int64_t index, const std::vector<HeldOut>& held) {
  if (held.empty() && !kept_.contains(index)) return {};
  const Kinds kinds = KindsOf(index, held);
  // A streamed choice's content was kept as it went out; a whole answer's is one of `held`.
  const auto streamed = content_.find(index);
  const Reading reading{kinds, streamed == content_.end() ? nullptr : &streamed->second};
  Verdict verdict = InOrder(index, reading);
  if (!verdict.ok()) return verdict;
  return AnyOrder(index, reading);
}

ChoiceJoins::Verdict ChoiceJoins::InOrder(int64_t index, const Reading& reading) const {
  const Kinds& kinds = reading.kinds;
  // In order: each kind after the running end of all before it; a kind of several texts (two
  // calls' arguments) is screened so even first (review helper-78: a key in three texts). The
  // rest, which a client may show above the answer or below it, both first and last.
  for (const int calls : {kArgumentsRank, kToolCallsRank}) {
    if (calls == kToolCallsRank && kinds.counts[kToolCallsRank] == kinds.counts[kArgumentsRank]) {
      break;
    }
    std::string before;
    size_t before_total = 0;
    // Whether `before` ends with the rest's text: an image's data, encrypted reasoning, which no
    // client joins to text, is not refused as a token the window cut (review helper-83).
    bool rest_end = false;
    for (const int rank : {kRestRank, 0, 1, kContentRank, 3, calls, kRestRank}) {
      const Side next = reading.StartOf(rank);
      if (next.text.empty()) continue;
      if (!before.empty() || kinds.counts[rank] > 1) {
        const Side end_before{before, before_total > before.size() && !rest_end};
        Verdict verdict = Join(index, end_before, next, kByKind);
        if (!verdict.ok()) return verdict;
      }
      rest_end = rank == kRestRank;
      const Side end = reading.EndOf(rank);
      before.append(end.text);
      before_total += rank == kContentRank && reading.content != nullptr ? reading.content->total
                                                                         : end.text.size();
      if (before.size() > kWindow) before.erase(0, before.size() - kWindow);
    }
  }
  return {};
}

// A choice's arguments are in both of the calls' kinds, and its tools' names in the second:
// never joined to what holds them.
bool ChoiceJoins::Apart(const Piece& a, const Piece& b) {
  const bool a_calls = a.rank == kArgumentsRank || a.rank == kToolCallsRank;
  const bool b_calls = b.rank == kArgumentsRank || b.rank == kToolCallsRank;
  const bool name_in = (a.rank == kToolMemberRank && b.rank == kToolCallsRank) ||
                       (b.rank == kToolMemberRank && a.rank == kToolCallsRank);
  return &a != &b && !(a_calls && b_calls) && !name_in;
}

ChoiceJoins::Side ChoiceJoins::Tail(Side side, size_t window) {
  if (side.text.size() <= window) return side;
  return {side.text.substr(side.text.size() - window), true};
}

ChoiceJoins::Side ChoiceJoins::Head(Side side, size_t window) {
  if (side.text.size() <= window) return side;
  return {side.text.substr(0, window), true};
}

ChoiceJoins::Verdict ChoiceJoins::AnyOrder(int64_t index, const Reading& reading) const {
  const Kinds& kinds = reading.kinds;
  // Any two texts, in either order, the others left out: each kind, and each of the rest's texts
  // on its own (a client shows one member of the rest and not the others: review helper-81,
  // reasoning_details' text with its id and format after it). And any three, the middle short
  // (review helper-81: a card in reasoning, content " 1111 " and arguments, a refusal hidden
  // between them).
  std::vector<Piece> pieces;
  for (const int rank : {0, 1, kContentRank, 3, kArgumentsRank, kToolCallsRank}) {
    const Side start = reading.StartOf(rank);
    if (start.text.empty()) continue;
    if (rank == kToolCallsRank && kinds.counts[rank] == kinds.counts[kArgumentsRank]) continue;
    pieces.push_back({start, reading.EndOf(rank), rank});
  }
  if (kinds.rest.size() > kMaxRestTexts) {
    return Refused(
        runtime::BadGateway(StrCat("the upstream's answer has more than ", kMaxRestTexts,
                                   " texts of kinds the guard does not know in choice ", index)));
  }
  if (kinds.names.size() > kMaxRestTexts) {
    return Refused(
        runtime::BadGateway(StrCat("the upstream's answer names more than ", kMaxRestTexts,
                                   " different tools in choice ", index)));
  }
  for (const RestText& rest : kinds.rest) {
    pieces.push_back({{rest.text}, {rest.text}, kRestRank});
  }
  for (const std::string_view name : kinds.names) {
    pieces.push_back({{name}, {name}, kToolMemberRank});
  }
  for (const Piece& first : pieces) {
    for (const Piece& second : pieces) {
      if (!Apart(first, second)) continue;
      // A member of the rest or a tool's name is joined to the kinds, not to another such:
      // there can be many of them. Over less: 4 KiB a side.
      const bool first_piece = first.rank == kRestRank || first.rank == kToolMemberRank;
      const bool second_piece = second.rank == kRestRank || second.rank == kToolMemberRank;
      if (first_piece && second_piece) continue;
      const size_t window = first_piece || second_piece ? kShownTail : kWindow;
      Verdict verdict = Join(index, Tail(first.end, window), Head(second.start, window), kByKind);
      if (!verdict.ok()) return verdict;
    }
  }
  return Triples(index, pieces);
}

ChoiceJoins::Verdict ChoiceJoins::Triples(int64_t index, const std::vector<Piece>& pieces) const {
  // Kinds only (at most six): each kind between two others, the ends 4 KiB a side and the middle
  // whole up to 4 KiB (a longer one holds no value whole but a token, which the pairs read).
  std::vector<const Piece*> kinds;
  for (const Piece& piece : pieces) {
    if (piece.rank != kRestRank && piece.rank != kToolMemberRank) kinds.push_back(&piece);
  }
  for (const Piece* middle : kinds) {
    if (middle->start.text.size() > kShownTail || middle->start.cut) continue;
    for (const Piece* first : kinds) {
      if (!Apart(*first, *middle)) continue;
      const Side end = Tail(first->end, kShownTail);
      std::string after(middle->start.text);
      for (const Piece* last : kinds) {
        if (!Apart(*last, *middle) || !Apart(*first, *last)) continue;
        const Side start = Head(last->start, kShownTail);
        after.resize(middle->start.text.size());
        after.append(start.text);
        Verdict verdict = Join(index, end, {after, start.cut}, kByKind);
        if (!verdict.ok()) return verdict;
      }
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
  // A token across the point that fills a cut side was not screened whole.
  if (before.text.empty() || after.text.empty() || !TokenByte(before.text.back()) ||
      !TokenByte(after.text.front())) {
    return verdict;
  }
  // Only a side cut at the kinds' window, as long as the longest run content holds back: a
  // shorter window (a piece's, the end shown as texts come) cuts signatures and encrypted
  // reasoning that clients never join to anything (review helper-82).
  const bool before_cut = before.cut && before.text.size() >= kWindow && AllTokenBytes(before.text);
  const bool after_cut = after.cut && after.text.size() >= kWindow && AllTokenBytes(after.text);
  if (before_cut || after_cut) {
    verdict.stop = runtime::BadGateway(
        StrCat("the upstream's stream has a token longer than the ",
               before_cut ? before.text.size() : after.text.size(),
               " bytes screened across the texts of choice ", index,
               ", which the guard cannot screen whole as a client that ", client, " shows it"));
  }
  return verdict;
}

}  // namespace pillar::stages
