// Where security decisions and changes go (R-SEC-7): every authentication failure,
// authorization decision and limit refusal on the request path, and every model load, unload,
// promotion, key and policy change, is handed to an AuditSink. AuditLog (audit_log.h) is the
// tamper-evident log; CountingAuditSink counts them for /metrics and forwards them.
//
//   if (!sink.Record({.kind = EventKind::kAuthorization, .allowed = true, ...})) refuse();
// Record() is called on request threads and must not block on I/O. The views in an Event are
// valid only during the call; `explain` builds the reason text only for sinks that want it,
// so a sink that counts pays no allocation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"

namespace pillar::audit {

// kModel: what the server serves (a version loaded, unloaded, withdrawn because its files no
// longer verify, an alias moved); kKey: API key changes; kPolicy: a policy file taken into
// service or refused.
enum class EventKind : uint8_t {
  kAuthentication,
  kAuthorization,
  kLimit,
  kModel,
  kKey,
  kPolicy,
  kContent,  // the content guard's findings in a call (types and offsets, never the text)
};
inline constexpr int kEventKinds = 7;

std::string_view EventKindName(EventKind kind);
// "allow"/"deny" for decisions (authentication, authorization, limit); "ok"/"failed" for
// changes (model, key, policy).
std::string_view DecisionName(EventKind kind, bool allowed);

// The reason of an event that has none. A function, not a lambda: a FunctionRef to a temporary
// lambda would dangle once the default member initializer's expression ends.
inline std::string NoReason() { return std::string(); }

struct Event {
  EventKind kind = EventKind::kAuthorization;
  bool allowed = false;
  int64_t time_us = 0;  // Unix microseconds
  std::string_view principal;
  std::string_view tenant;
  std::string_view action;
  std::string_view resource;
  std::string_view request_id;
  std::string_view remote;
  // The decision's reason, e.g. "denied by rule 'x' (policy.toml:12)".
  absl::FunctionRef<std::string()> explain = NoReason;
};

class AuditSink {
 public:
  virtual ~AuditSink() = default;
  // False only when the event could not be recorded and the sink is configured to refuse
  // requests it cannot audit (a full queue with on_full = "refuse"): the caller then refuses the
  // request. Sinks that never refuse return true.
  virtual bool Record(const Event& event) = 0;
};

}  // namespace pillar::audit
