// The members of GuardStage (guard_stage.h) that screen a call's prompt: every string the
// client wrote, one by one (redacted in place, or the call blocked), then a message's text parts
// joined, as servers join them.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/strings.h"
#include "protocol/openai_texts.h"
#include "stages/guard_stage.h"
#include "stages/whole_answer.h"

namespace pillar::stages {

namespace {

// What a URL's screening found that is not allowed (guard::ScreenUrl): its type, or the deny
// rule's reason, without offsets (they are those of the URL as read); empty when nothing.
std::string UrlFinding(const guard::ScreenResult& r) {
  if (r.blocked) return r.block_reason.substr(0, r.block_reason.find(" at bytes"));
  for (const guard::ScreenedFinding& f : r.findings) {
    if (f.action != guard::Action::kAllow) return std::string(guard::EntityName(f.finding.type));
  }
  return std::string();
}

}  // namespace

bool GuardStage::ScreenPrompt(pipeline::Exchange& ex, const guard::GuardConfig& config) const {
  std::string blocked;
  bool redacted = false;
  absl::StatusOr<std::string> body = protocol::EditRequestTexts(
      ex.generate->body,
      [&](std::string_view where, std::string_view text) -> std::optional<std::string> {
        if (protocol::IsLink(where)) {  // an image's or a file's: read, not rewritten
          guard::ScreenResult r = guard::ScreenUrl(text, config);
          const std::string found = UrlFinding(r);
          // Counted and audited as what happens to the call: a finding redacted elsewhere
          // blocks it here.
          for (guard::ScreenedFinding& f : r.findings) {
            if (f.action != guard::Action::kAllow) f.action = guard::Action::kBlock;
          }
          Note(ex, "prompt", r.findings, r.denied);
          if (!found.empty() && blocked.empty()) {
            blocked = StrCat(found, " in ", where, " (a URL is not rewritten)");
          }
          return std::nullopt;
        }
        guard::ScreenResult r = guard::Screen(text, config);
        Note(ex, "prompt", r.findings, r.denied);
        if (r.blocked && blocked.empty()) blocked = StrCat(r.block_reason, " of ", where);
        // A tool call's arguments are JSON that servers parse before their chat template
        // writes them again (review helper-90: {"k":"\u0041KIA..."} reached the model as a
        // key): read as a client that decodes them, as an answer's are.
        if (!r.blocked && blocked.empty() && where.ends_with(".arguments")) {
          if (std::string decoded = DecodedFinding(text, config); !decoded.empty()) {
            blocked = StrCat(decoded, " of ", where);
            return std::nullopt;
          }
        }
        if (r.blocked || r.text == text) return std::nullopt;
        redacted = true;
        return std::move(r.text);
      });
  if (!body.ok()) {
    ex.Fail(body.status());
    return false;
  }
  if (blocked.empty()) blocked = SplitAcrossParts(ex, redacted ? *body : ex.generate->body, config);
  if (!blocked.empty()) {
    ex.content_blocked = true;
    ex.Fail(absl::InvalidArgumentError(
        StrCat("the prompt was blocked by the content guard: ", blocked)));
    return false;
  }
  if (redacted) ex.generate->body = std::move(*body);
  return true;
}

std::string GuardStage::SplitAcrossParts(pipeline::Exchange& ex, std::string_view body,
                                         const guard::GuardConfig& config) const {
  // Each message's text parts, in order, as servers join them (vLLM with a line break).
  std::vector<std::pair<std::string, std::string>> joined;  // message, its parts' texts
  std::vector<int> parts;
  protocol::ForEachRequestText(body, [&](std::string_view where, std::string_view text) {
    const size_t content = where.find("].content[");
    if (!where.starts_with("messages[") || content == std::string_view::npos ||
        !where.ends_with("].text")) {
      return;
    }
    const std::string_view message = where.substr(0, content + 1);
    if (joined.empty() || joined.back().first != message) {
      joined.emplace_back(std::string(message), std::string(text));
      parts.push_back(1);
    } else {
      StrAppend(&joined.back().second, "\n", text);
      ++parts.back();
    }
  });
  for (size_t i = 0; i < joined.size(); ++i) {
    if (parts[i] < 2) continue;
    // Each part was screened (and redacted) alone: what is found now lies across two.
    guard::ScreenResult r = guard::Screen(joined[i].second, config);
    std::string_view type;
    for (guard::ScreenedFinding& f : r.findings) {
      if (f.action == guard::Action::kAllow) continue;
      if (type.empty()) type = guard::EntityName(f.finding.type);
      f.action = guard::Action::kBlock;  // it cannot be redacted in parts: the call is refused
    }
    if (type.empty() && !r.blocked) continue;
    Note(ex, "prompt", r.findings, r.denied);
    return StrCat(type.empty() ? r.block_reason.substr(0, r.block_reason.find(" at bytes"))
                               : std::string(type),
                  " split across the text parts of ", joined[i].first,
                  " (servers join them before the model reads them)");
  }
  return std::string();
}

}  // namespace pillar::stages
