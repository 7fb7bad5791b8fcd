#include "stages/guarded_events.h"

#include <simdjson.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "common/json_writer.h"
#include "common/strings.h"
#include "guard/display_controls.h"
#include "guard/json_escapes.h"
#include "guard/screen.h"
#include "guard/text_fold.h"
#include "protocol/openai_texts.h"
#include "runtime/runner.h"
#include "stages/choice_joins.h"
#include "stages/delta_places.h"
#include "stages/escaped_content.h"
#include "stages/guard_stage.h"
#include "stages/whole_answer.h"

namespace pillar::stages {
namespace {

// See guarded_events.h.
class GuardedEvents final : public runtime::EventSink {
 public:
  GuardedEvents(std::shared_ptr<runtime::EventSink> inner, pipeline::Exchange& ex,
                std::shared_ptr<const guard::GuardConfig> root, const guard::GuardConfig& config,
                const GuardStage& stage, int64_t choices)
      : inner_(std::move(inner)),
        ex_(ex),
        root_(std::move(root)),
        config_(config),
        stage_(stage),
        choices_(choices) {}

  int64_t ClientWaitNanos(int64_t now_ns) const override { return inner_->ClientWaitNanos(now_ns); }
  void Usage(const protocol::TokenUsage& usage) override { inner_->Usage(usage); }

  void Event(runtime::EventKind kind, std::string event,
             absl::AnyInvocable<void(bool) &&> next) override {
    if (blocked_) return std::move(next)(false);
    if (kind == runtime::EventKind::kDone) return Flush(kind, std::move(event), std::move(next));
    // A chunk, or the usage chunk (whose choices are empty, but whose other members a client
    // reads as well): nothing of it goes out unscreened.
    const std::string_view data = Data(event);
    finished_.clear();
    editing_chunk_ = true;
    absl::StatusOr<std::string> edited = protocol::EditChunkTexts(
        data,
        ex_.operation == pipeline::Operation::kCompletions ? protocol::ChunkRoute::kCompletions
                                                           : protocol::ChunkRoute::kChat,
        [this](int64_t index, std::string_view text, bool finished) {
          if (finished) finished_.push_back(index);
          return Release(index, text, finished);
        },
        [this](int64_t index, const protocol::DeltaField& field, std::string_view fragment) {
          // An empty text adds nothing a client shows (Hold drops it): it takes no place either.
          if (blocked_ || (!field.structural && fragment.empty())) return std::string();
          // Asked first: the places kept are per choice the request asked for.
          if (!Asked(index)) return std::string();
          absl::StatusOr<protocol::DeltaField> placed = places_.Place(index, field);
          if (!placed.ok()) {
            Stop(placed.status());
            return std::string();
          }
          if (placed->structural) return Structural(index, *placed, fragment);
          Hold(index, *placed, fragment);
          return std::string();
        },
        [this](std::string_view where, std::string_view text) -> std::optional<std::string> {
          return ScreenChunkString(where, text);
        });
    editing_chunk_ = false;
    if (!edited.ok() && !blocked_) {  // nothing the guard cannot read goes out
      Stop(runtime::BadGateway(
          StrCat("the upstream's stream cannot be screened: ", edited.status().message())));
    }
    if (blocked_) return std::move(next)(false);
    // From the chunk as screened: the chunks the guard writes repeat these members.
    if (head_.empty()) head_ = ChunkHead(*edited);
    if (kind == runtime::EventKind::kUsage) {
      return Flush(kind, StrCat("data: ", *edited, "\n\n"), std::move(next));
    }
    // What was held of the choices that finish goes out before the chunk that says so.
    std::string events;
    for (int64_t index : finished_) ReleaseFields(index, events);
    if (blocked_) return std::move(next)(false);
    StrAppend(&events, "data: ", *edited, "\n\n");
    inner_->Event(kind, std::move(events), std::move(next));
  }

 private:
  // A choice's text that is not released yet.
  struct HeldText {
    std::string text;         // not yet released
    bool blank = false;       // whether `text` has an ASCII blank
    bool ends_blank = false;  // whether `text`, as read (folded), ends with a blank
    // What was released of it ended within a line, which `text` continues (ScreenPrefix).
    bool continues_line = false;
    size_t screened = 0;  // the size of `text` when it was last screened
    // The text as a client that decodes its JSON escapes reads it.
    EscapedContent escaped;
  };

  static std::string_view Data(std::string_view event) {
    if (event.starts_with("data: ")) event.remove_prefix(6);
    while (!event.empty() && event.back() == '\n') event.remove_suffix(1);
    return event;
  }

  // The members of a chunk the flush chunk repeats: "id", "object", "created", "model".
  static std::string ChunkHead(std::string_view data) {
    simdjson::dom::parser parser;
    simdjson::dom::object top;
    if (parser.parse(data.data(), data.size()).get(top) != simdjson::SUCCESS) return "{";
    std::string head = "{";
    for (const char* key : {"id", "object", "created", "model"}) {
      simdjson::dom::element e;
      if (top[key].get(e) != simdjson::SUCCESS) continue;
      StrAppend(&head, head.size() > 1 ? "," : "", "\"", key, "\":", simdjson::minify(e));
    }
    return head;
  }

  void Stop(absl::Status status) {
    blocked_ = true;
    ex_.answer_blocked = std::move(status);
  }

  // A string of a chunk outside its deltas (its id and model, a choice's finish_reason, a
  // member of the upstream's own), whole. Every chunk repeats the stream's id and model: a value
  // found clean at the same place last time is not screened again.
  std::optional<std::string> ScreenChunkString(std::string_view where, std::string_view text) {
    auto it = clean_.find(where);
    if (it != clean_.end() && it->second == text) return std::nullopt;
    std::optional<std::string> screened = ScreenWhole(where, text);
    if (blocked_ || screened) return screened;
    if (it != clean_.end()) {
      it->second = std::string(text);
    } else if (clean_.size() < kMaxClean) {
      clean_.emplace(std::string(where), std::string(text));
    }
    return std::nullopt;
  }

  // A string of a delta other than its content (a refusal, a tool call's arguments), whole, as
  // shown (without its display controls, unless the configuration keeps them, and if it is JSON
  // without their escapes: ShownParsed).
  std::optional<std::string> ScreenWhole(std::string_view where, std::string_view text) {
    std::string storage;
    std::string parsed_storage;
    const std::string_view sent = text;
    if (config_.strip_answer_controls) text = guard::WithoutDisplayControls(text, storage);
    text = ShownParsed(text, parsed_storage, config_);
    guard::ScreenResult r = guard::Screen(text, config_);
    stage_.Note(ex_, "answer", r.findings, r.denied);
    if (!r.blocked) {
      if (std::string decoded = DecodedFinding(text, config_); !decoded.empty()) {
        r.blocked = true;
        r.block_reason = std::move(decoded);
      }
    }
    if (r.blocked && !blocked_) {
      ex_.content_blocked = true;
      // `where` holds member names the upstream chose: they may carry values too.
      Stop(absl::PermissionDeniedError(
          StrCat("the model's answer was blocked by the content guard: ", r.block_reason, " of ",
                 guard::RedactAll(where))));
    }
    if (r.blocked || r.text == sent) return std::nullopt;
    return std::move(r.text);
  }

  // A structural member (an id, a role, a type) or a number goes out as it is, in one piece:
  // clients join its fragments as they do a text's, so a second, different value ends the call
  // (a number may come once only: openai-python adds its repeats), and a value is screened as a
  // client would show it, once or joined with its repeats, any finding a block (a member cannot
  // be redacted).
  std::string Structural(int64_t index, const protocol::DeltaField& field, std::string_view value) {
    if (blocked_) return std::string();
    // The same name again, or nothing, adds nothing a client shows, even after the choice
    // finished (a usage chunk that repeats the finished choice's role: review helper-77).
    if (auto seen = structural_.find({index, field});
        seen != structural_.end() && !field.number && (value.empty() || seen->second == value)) {
      return std::string(value);
    }
    if (!StillOpen(index)) return std::string();
    // A place that held text before: a client would join this value to that text.
    if (held_fields_.contains({index, Unflagged(field)})) {
      Stop(runtime::BadGateway(StrCat("the upstream's stream sends a member of choice ", index,
                                      " as text and as a name or number")));
      return std::string();
    }
    auto [it, inserted] = structural_.try_emplace({index, field}, value);
    if (inserted) {
      structural_bytes_ += value.size() + PathBytes(field);
      if (structural_bytes_ > kMaxHeldFields || structural_.size() > kMaxFields) {
        Stop(runtime::BadGateway("the upstream's stream names more members than the guard checks"));
        return std::string();
      }
    } else if (field.number) {
      // openai-python adds a number's repeats, openai-node joins them: neither is screened.
      Stop(runtime::BadGateway(
          StrCat("the upstream's stream sends a number of choice ", index, " twice at one place")));
      return std::string();
    } else if (value.empty() || it->second == value) {
      return std::string(value);  // screened when it first came
    } else if (!it->second.empty()) {
      Stop(runtime::BadGateway(StrCat("the upstream's stream sends a member of choice ", index,
                                      " that names a thing in parts")));
      return std::string();
    } else {
      it->second = std::string(value);  // filling an empty one joins nothing
    }
    if (!value.empty() && !StructuralIsClean(index, field, value)) return std::string();
    if (!Clean(joins_.Structural(index, field, value))) return std::string();
    return std::string(value);
  }

  bool StructuralIsClean(int64_t index, const protocol::DeltaField& field, std::string_view value) {
    if (config_.strip_answer_controls && guard::HasDisplayControls(value)) {
      // It cannot be edited (clients join its fragments): what a terminal would do with it is
      // not passed on.
      Stop(runtime::BadGateway(StrCat("the upstream's stream sends display controls in the member ",
                                      guard::RedactAll(DeltaWhere(field)), " of choice ", index)));
      return false;
    }
    const std::string found = guard::RepeatedFinding(value, config_);
    if (found.empty()) return true;
    const std::string where = DeltaWhere(field);
    ex_.content_blocked = true;
    Stop(absl::PermissionDeniedError(
        StrCat("the model's answer was blocked by the content guard: ", guard::RedactAll(found),
               " in the member ", guard::RedactAll(where), " of choice ", index)));
    return false;
  }

  // A fragment of a delta's other texts (a tool call's arguments, a refusal, reasoning): held
  // whole until its choice finishes, then screened whole (a value cut across fragments is seen),
  // up to kMaxHeldFields bytes and kMaxFields places a call.
  void Hold(int64_t index, const protocol::DeltaField& field, std::string_view fragment) {
    if (blocked_ || fragment.empty() || !StillOpen(index)) return;
    auto [held, inserted] = held_fields_.try_emplace({index, field});
    if (inserted && structural_.contains({index, Flagged(field)})) {
      held_fields_.erase(held);
      return Stop(runtime::BadGateway(StrCat("the upstream's stream sends a member of choice ",
                                             index, " as text and as a name or number")));
    }
    held_field_bytes_ += fragment.size() + (inserted ? PathBytes(field) : 0);
    if (held_field_bytes_ > kMaxHeldFields || held_fields_.size() > kMaxFields) {
      return Stop(runtime::BadGateway(
          StrCat("the upstream's stream holds more tool calls and other texts than the guard "
                 "screens (",
                 kMaxHeldFields >> 20, " MiB, ", kMaxFields, " fields)")));
    }
    held->second.append(fragment);
  }

  // Whether a fragment of choice `index` (one the request asked for) may go out; if not, stops
  // the call. The choice must not have finished (what was held of a finished choice went
  // out, screened: more of it would be screened apart from the rest, and a client that joins
  // them would have a value no screen saw whole).
  bool StillOpen(int64_t index) {
    if (finished_choices_.contains(index)) {
      StopAfterFinish(index);
      return false;
    }
    return true;
  }

  // Whether choice `index` is one the request asked for (its n); if not, stops the call. Text is
  // held per choice, so that an upstream cannot make the guard hold text for choices without
  // end.
  bool Asked(int64_t index) {
    if (index >= 0 && index < choices_) return true;
    if (!blocked_) {
      Stop(runtime::BadGateway(
          StrCat("the upstream's stream has a choice ", index, " the request did not ask for")));
    }
    return false;
  }

  // The same place taken as a structural member (a number, in a delta's held places) or as
  // text.
  static protocol::DeltaField Flagged(protocol::DeltaField field) {
    field.structural = field.number = true;
    return field;
  }
  static protocol::DeltaField Unflagged(protocol::DeltaField field) {
    field.structural = field.number = false;
    return field;
  }
  // What keeping a place costs besides its text: the names on its path (an upstream chooses
  // them, and they can be long).
  static size_t PathBytes(const protocol::DeltaField& field) {
    size_t bytes = 0;
    for (const protocol::DeltaField::Segment& segment : field.path) bytes += segment.key.size();
    return bytes;
  }

  // Appends the events that carry what is held of choice `index`'s other texts, each screened
  // whole, and lets go of them; on a block, stops instead.
  void ReleaseFields(int64_t index, std::string& events) {
    // What goes out now was screened whole; more of the choice would be screened apart from it.
    finished_choices_.insert(index);
    std::vector<ChoiceJoins::HeldOut> out;
    auto it = held_fields_.lower_bound({index, protocol::DeltaField{}});
    while (it != held_fields_.end() && it->first.first == index && !blocked_) {
      const protocol::DeltaField& field = it->first.second;
      const std::string where = StrCat(DeltaWhere(field), " of choice ", index);
      std::optional<std::string> screened = ScreenWhole(where, it->second);
      if (blocked_) return;
      out.push_back({field, screened ? std::move(*screened) : std::move(it->second)});
      it = held_fields_.erase(it);
    }
    if (!Clean(joins_.Finished(index, out))) return;
    std::vector<ChoiceJoins::ShownText> shown;
    for (const ChoiceJoins::HeldOut& field : out) shown.push_back({field.sent, ++field_serial_});
    if (!Clean(joins_.Shown(index, shown))) return;
    for (const ChoiceJoins::HeldOut& field : out) {
      std::string chunk = head_;
      StrAppend(&chunk, chunk.size() > 1 ? "," : "", "\"choices\":[",
                protocol::DeltaChoice(index, field.field, field.sent), "]}");
      StrAppend(&events, "data: ", chunk, "\n\n");
    }
    // The choice's last text goes out after them, in the chunk that says it finished.
    if (auto last = final_text_.find(index); last != final_text_.end() && !blocked_) {
      (void)Clean(joins_.Shown(index, last->second, ChoiceJoins::kContent));
      final_text_.erase(last);
    }
  }

  // Whether `verdict` lets the call go on; if not, counts what the join found and stops it.
  bool Clean(ChoiceJoins::Verdict verdict) {
    if (verdict.ok()) return true;
    stage_.Note(ex_, "answer", verdict.screen.findings, verdict.screen.denied);
    if (absl::IsPermissionDenied(verdict.stop)) ex_.content_blocked = true;
    Stop(std::move(verdict.stop));
    return false;
  }

  void StopAfterFinish(int64_t index) {
    Stop(runtime::BadGateway(
        StrCat("the upstream's stream goes on with choice ", index, " after it finished")));
  }

  // What of choice `index`'s text may go out now.
  std::string Release(int64_t index, std::string_view text, bool finished) {
    if (!Asked(index)) return std::string();
    // Choices first appear in order: clients that place a choice by its order of arrival
    // rather than its index would join texts the guard screened apart.
    if (index > last_choice_ + 1) {
      if (!blocked_) {
        Stop(runtime::BadGateway(StrCat("the upstream's stream has choice ", index,
                                        " before choice ", last_choice_ + 1)));
      }
      return std::string();
    }
    last_choice_ = std::max(last_choice_, index);
    if (finished_choices_.contains(index)) {
      if (!text.empty() && !blocked_) StopAfterFinish(index);
      return std::string();
    }
    if (finished) finished_choices_.insert(index);
    // Held as shown: a chunk's display controls go before it joins the text (each is whole in
    // its chunk; an escape sequence cut by the chunk's end loses its ESC, and what comes of it in
    // the next chunk is shown as text, and screened as such).
    std::string storage;
    if (config_.strip_answer_controls) text = guard::WithoutDisplayControls(text, storage);
    HeldText& held_text = held_[index];
    std::string& held = held_text.text;
    const size_t appended_at = held.size();
    held.append(text);
    held_text.escaped.TakeDisplayControls(held, appended_at, finished, config_);
    if (!finished && Unchanged(held_text, text)) return std::string();
    // A text held far past its window (overwrites that keep what is shown the same size, so
    // nothing goes out) is screened again only once it grew by a quarter: screening each chunk
    // of it made a stream quadratic in its length (found by review helper-68: 16,000 chunks of
    // "\bX" took 11 s). Nothing is released between, and the last chunk is always screened.
    // From twice the window and 256 bytes: a deny phrase's first word holds the text after it
    // (found by review helper-69: re-screened whole for each chunk up to 4 KiB, a stream of small
    // chunks cost 25 to 50 times the CPU of one without it).
    const size_t floor = 2 * size_t(config_.hold_back_bytes) + 256;
    if (!finished && held.size() > floor &&
        held.size() < held_text.screened + held_text.screened / 4) {
      return std::string();
    }
    if (!finished && held_text.escaped.Waits(held)) return std::string();
    guard::PrefixResult r = guard::ScreenPrefix(held, config_, size_t(config_.hold_back_bytes),
                                                finished, held_text.continues_line);
    stage_.Note(ex_, "answer", r.findings, r.denied);
    if (!r.blocked) {
      if (std::string escaped = held_text.escaped.Finding(held, config_); !escaped.empty()) {
        r.blocked = true;
        r.block_reason = std::move(escaped);
      }
    }
    if (r.padded && !blocked_) {
      Stop(runtime::BadGateway(StrCat("the upstream's stream pads choice ", index,
                                      "'s text with more than ", guard::kMaxHeldRun >> 10,
                                      " KiB of blanks or characters that print as nothing")));
      return std::string();
    }
    if (r.blocked) {
      if (!blocked_) {
        ex_.content_blocked = true;
        Stop(
            absl::PermissionDeniedError(StrCat("the model's answer was blocked by the content "
                                               "guard: ",
                                               r.block_reason, " of the streamed choice ", index)));
      }
      return std::string();
    }
    if (!r.released.empty()) {
      joins_.ContentReleased(index, r.released);
      // The last text of a choice finishing in the chunk being edited goes out after what was
      // held of its other texts (ReleaseFields): checked there, in that order.
      if (finished && editing_chunk_) {
        final_text_[index] = r.released;
      } else if (!Clean(joins_.Shown(index, r.released, ChoiceJoins::kContent))) {
        return std::string();
      }
    }
    if (r.consumed > 0) {
      if (!held_text.escaped.Released(std::string_view(held).substr(0, r.consumed), config_)) {
        Stop(runtime::BadGateway(StrCat("the upstream's stream pads choice ", index,
                                        "'s text with escapes of characters that print as "
                                        "nothing")));
        return std::string();
      }
      const char last = held[r.consumed - 1];
      held_text.continues_line = last != '\n' && last != '\v' && last != '\f';
    }
    held.erase(0, r.consumed);
    // Growth is counted from what is held now: after a release, from what is left of it.
    held_text.screened = held.size();
    held_text.blank = held.find_first_of(guard::kBlankBytes) != std::string::npos;
    return std::move(r.released);
  }

  // Whether screening `held` again, now that `text` was appended to it, would release nothing
  // and find nothing new, so that a text that grows a little at a time costs linear time: when
  // it is still one run without a blank, within the bound (ScreenPrefix holds all of it), or
  // when what was appended prints as nothing, or as blanks after a blank (the text as read
  // did not change, and neither did the window). Within the bound only: past it ScreenPrefix
  // must see it to say so.
  bool Unchanged(HeldText& held, std::string_view text) {
    const guard::FoldedText folded(text);
    const std::string_view seen = folded.text();
    const bool blanks_only = seen.find_first_not_of(guard::kBlankBytes) == std::string_view::npos;
    const bool was_blank = held.ends_blank;
    if (!seen.empty()) held.ends_blank = guard::kBlankBytes.find(seen.back()) != std::string::npos;
    held.blank = held.blank || text.find_first_of(guard::kBlankBytes) != std::string_view::npos;
    if (config_.hold_back_bytes == 0) return false;
    const size_t bound = size_t(config_.hold_back_bytes) + guard::kMaxHeldRun;
    if (!held.blank && held.text.size() <= guard::kMaxHeldRun) return true;
    return held.text.size() <= bound && (seen.empty() || (blanks_only && was_blank));
  }

  // Before the usage chunk or [DONE]: what is still held of choices that never said they
  // finished goes out in a chunk of its own.
  void Flush(runtime::EventKind kind, std::string event, absl::AnyInvocable<void(bool) &&> next) {
    std::string flushed;
    // Each choice that never said it finished: what is held of its content is released first
    // (its end goes out last, after its other texts, as at a finish), so that the kinds of its
    // texts are checked with all of its content (ChoiceJoins::Finished).
    std::set<int64_t> open;
    for (const auto& entry : held_fields_) open.insert(entry.first.first);
    for (const auto& entry : held_) {
      if (!entry.second.text.empty()) open.insert(entry.first);
    }
    for (const int64_t index : open) {
      std::string text;
      if (auto held = held_.find(index); held != held_.end() && !held->second.text.empty()) {
        editing_chunk_ = true;  // the end is checked after the held texts, in ReleaseFields
        text = Release(index, "", true);
        editing_chunk_ = false;
      }
      if (blocked_) return std::move(next)(false);
      ReleaseFields(index, flushed);
      if (blocked_) return std::move(next)(false);
      if (text.empty()) continue;
      // A chunk of its own: the stream's id, object, created and model, and this choice's text,
      // where the route's clients read it (review helper-77: chosen by the upstream's "object",
      // a completions client got it as a delta it does not read).
      std::string chunk = head_;
      const bool chat = ex_.operation != pipeline::Operation::kCompletions;
      StrAppend(&chunk, chunk.size() > 1 ? "," : "", "\"choices\":[{\"index\":", index,
                chat ? ",\"delta\":{\"content\":" : ",\"text\":");
      AppendJsonString(chunk, text);
      chunk.append(chat ? "},\"finish_reason\":null}]}" : ",\"finish_reason\":null}]}");
      StrAppend(&flushed, "data: ", chunk, "\n\n");
    }
    if (flushed.empty()) return inner_->Event(kind, std::move(event), std::move(next));
    inner_->Event(
        runtime::EventKind::kChunk, std::move(flushed),
        [inner = inner_, kind, event = std::move(event), next = std::move(next)](bool ok) mutable {
          if (!ok) return std::move(next)(false);
          inner->Event(kind, std::move(event), std::move(next));
        });
  }

  std::shared_ptr<runtime::EventSink> inner_;
  pipeline::Exchange& ex_;
  std::shared_ptr<const guard::GuardConfig> root_;  // keeps config_ alive
  const guard::GuardConfig& config_;
  const GuardStage& stage_;
  const int64_t choices_;             // the request's n
  std::map<int64_t, HeldText> held_;  // by choice index
  // Where a client joins the choices' texts (what was shown, each content's start and end).
  ChoiceJoins joins_{config_};
  int field_serial_ = ChoiceJoins::kContent;  // a held text's serial, for joins_.Shown
  // The last text of each choice finishing in the chunk being edited, and whether one is.
  std::map<int64_t, std::string> final_text_;
  bool editing_chunk_ = false;
  // A choice's other texts, by where they go; held whole until it finishes.
  static constexpr size_t kMaxHeldFields = size_t(1) << 20;
  static constexpr size_t kMaxFields = 1024;
  std::map<std::pair<int64_t, protocol::DeltaField>, std::string> held_fields_;
  // The structural members seen, by where they are: the first value of each.
  std::map<std::pair<int64_t, protocol::DeltaField>, std::string> structural_;
  size_t structural_bytes_ = 0;
  // The last value found clean at each place outside the deltas, for the first few places.
  static constexpr size_t kMaxClean = 16;
  std::map<std::string, std::string, std::less<>> clean_;
  // Where each fragment goes (a place per member and level at most, for the places held).
  DeltaPlaces places_{2 * kMaxFields * protocol::kMaxDeltaDepth};
  size_t held_field_bytes_ = 0;
  std::vector<int64_t> finished_;       // the choices the chunk being edited finishes
  std::set<int64_t> finished_choices_;  // every choice that finished, whose text all went out
  int64_t last_choice_ = -1;            // the highest choice index seen so far
  std::string head_;                    // "{" and the first chunk's id, object, created, model
  bool blocked_ = false;
};

}  // namespace

std::shared_ptr<runtime::EventSink> GuardEvents(std::shared_ptr<runtime::EventSink> inner,
                                                pipeline::Exchange& ex,
                                                std::shared_ptr<const guard::GuardConfig> root,
                                                const guard::GuardConfig& config,
                                                const GuardStage& stage, int64_t choices) {
  return std::make_shared<GuardedEvents>(std::move(inner), ex, std::move(root), config, stage,
                                         choices);
}

}  // namespace pillar::stages
