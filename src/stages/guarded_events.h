// A streamed answer through the guard stage (guard_stage.h): the event sink that sits between
// the model's producer and the client, and lets out only what the content guard saw whole.
// - A choice's text (content, or a completion's text) is screened with what came before it and
//   not yet released; only the part clear of the hold-back window (hold_back_bytes, and any
//   finding that reaches into it) goes out (guard::ScreenPrefix), the rest when the choice
//   finishes.
// - Every other string of a delta (a tool call's arguments, a refusal, reasoning, an audio
//   transcript) is held whole, keyed by its path, until its choice finishes, then screened whole
//   and released in a chunk of its own before the chunk that finishes the choice; at most 1 MiB
//   and 1024 such fields a call.
// - Structural members (ids, roles, types) go out as they come, but in one piece: a second,
//   different value ends the call, and each is screened as a client that joins its repeats would
//   have it.
// - What the guard cannot read as a client would (more text after a choice finished, a member
//   named twice, a choice out of order or without a valid index) ends the call with 502.
// A block stops the producer and leaves the reason in the exchange (answer_blocked), which ends
// the stream with an in-band error event.
#pragma once

#include <cstdint>
#include <memory>

#include "guard/guard_config.h"
#include "pipeline/exchange.h"
#include "runtime/runner.h"

namespace pillar::stages {

class GuardStage;

// `inner` guarded for the call `ex` under `config` (which `root` keeps alive); `stage` counts
// and notes the findings; `choices` is the request's n.
std::shared_ptr<runtime::EventSink> GuardEvents(std::shared_ptr<runtime::EventSink> inner,
                                                pipeline::Exchange& ex,
                                                std::shared_ptr<const guard::GuardConfig> root,
                                                const guard::GuardConfig& config,
                                                const GuardStage& stage, int64_t choices);

}  // namespace pillar::stages
