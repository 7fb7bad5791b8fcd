// Where security decisions go (R-SEC-7): every authentication failure, authorization decision
// and limit refusal on the request path is handed to an AuditSink. The tamper-evident log is
// one implementation (issue 4); CountingAuditSink below counts them for /metrics.
//
//   sink.Record({.kind = EventKind::kAuthorization, .allowed = false, .principal = id, ...});
// Record() is called on request threads and must not block on I/O. The views in an Event are
// valid only during the call; `explain` builds the reason text only for sinks that want it,
// so a sink that counts pays no allocation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"

namespace pillar::audit {

// kModel: the server's own decisions about what it serves (a version withdrawn because its
// files no longer verify).
enum class EventKind : uint8_t { kAuthentication, kAuthorization, kLimit, kModel };
inline constexpr int kEventKinds = 4;

std::string_view EventKindName(EventKind kind);

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
  absl::FunctionRef<std::string()> explain = [] { return std::string(); };
};

class AuditSink {
 public:
  virtual ~AuditSink() = default;
  virtual void Record(const Event& event) = 0;
};

}  // namespace pillar::audit
