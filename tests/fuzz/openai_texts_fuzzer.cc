// Fuzzes the guard's path through OpenAI-compatible bodies: finding and replacing texts in a
// request, an answer and a stream chunk (protocol/openai_texts.h), and screening a stream's text
// piece by piece with a hold-back (guard::ScreenPrefix). Bodies and chunks are untrusted (a
// client's, an upstream's). Whatever the bytes: an edit that keeps every text writes JSON that
// edits again to itself; an edit that replaces every text still writes JSON; a stream's text
// released piece by piece never releases more bytes than arrived, nor a byte twice.
#include <simdjson.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "guard/guard_config.h"
#include "guard/screen.h"
#include "protocol/openai_texts.h"

namespace {

using pillar::protocol::EditAnswerTexts;
using pillar::protocol::EditChunkTexts;
using pillar::protocol::EditRequestTexts;

bool IsJson(const std::string& text) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  return parser.parse(text.data(), text.size()).get(root) == simdjson::SUCCESS;
}

void CheckEdits(std::string_view body) {
  auto keep = [](std::string_view, std::string_view) -> std::optional<std::string> {
    return std::nullopt;
  };
  auto replace = [](std::string_view, std::string_view text) -> std::optional<std::string> {
    return "<" + std::string(text.substr(0, 3)) + "\"\\>";
  };
  for (auto edit : {EditRequestTexts, EditAnswerTexts}) {
    absl::StatusOr<std::string> kept = edit(body, keep);
    if (!kept.ok()) continue;
    if (!IsJson(*kept)) __builtin_trap();
    absl::StatusOr<std::string> again = edit(*kept, keep);
    if (!again.ok() || *again != *kept) __builtin_trap();
    absl::StatusOr<std::string> replaced = edit(body, replace);
    if (!replaced.ok() || !IsJson(*replaced)) __builtin_trap();
  }
  // What the estimates and the injection heuristics read lies inside the body.
  pillar::protocol::ForEachRequestText(body, [&](std::string_view where, std::string_view text) {
    if (text.size() > body.size()) __builtin_trap();
    (void)pillar::protocol::IsLink(where);
    (void)pillar::protocol::IsAttachment(where);
  });
  // Either route's reading: the last byte's low bit chooses.
  const auto route = !body.empty() && (body.back() & 1) ? pillar::protocol::ChunkRoute::kCompletions
                                                        : pillar::protocol::ChunkRoute::kChat;
  absl::StatusOr<std::string> chunk = EditChunkTexts(
      body, route, [](int64_t, std::string_view text, bool) { return std::string(text) + "\"x"; },
      [](int64_t index, const pillar::protocol::DeltaField& field, std::string_view fragment) {
        // What a guard writes out later must be JSON too.
        if (!IsJson(pillar::protocol::DeltaChoice(index, field, fragment))) __builtin_trap();
        return std::string(fragment.substr(0, 2)) + "\\\"";
      },
      replace);
  if (chunk.ok() && !IsJson(*chunk)) __builtin_trap();
}

void CheckStream(std::string_view text, size_t piece, size_t hold_back) {
  static const pillar::guard::GuardConfig config;
  std::string held;
  size_t arrived = 0, released_bytes = 0;
  for (size_t i = 0; i <= text.size(); i += piece) {
    const bool final = i + piece > text.size();
    const std::string_view part = text.substr(std::min(i, text.size()), piece);
    held.append(part);
    arrived += part.size();
    pillar::guard::PrefixResult r = pillar::guard::ScreenPrefix(held, config, hold_back, final);
    if (r.consumed > held.size()) __builtin_trap();
    if (r.blocked) return;
    released_bytes += r.consumed;
    held.erase(0, r.consumed);
    if (final && !held.empty()) __builtin_trap();  // the end releases everything
  }
  if (released_bytes != arrived) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 2, size - 2);
  CheckEdits(rest);
  CheckStream(rest, size_t(data[0] % 32) + 1, size_t(data[1] % 64));
  return 0;
}
