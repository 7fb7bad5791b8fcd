// The audit event for a decision on a request in the chain: who, what, on which resource, from
// where, under which request id, and why (built only if the sink asks).
//
//   audit.Record(ExchangeEvent(ex, EventKind::kLimit, allowed, explain, clock_));
#pragma once

#include "audit/audit_sink.h"
#include "common/clock.h"
#include "pipeline/exchange.h"

namespace pillar::stages {

// `ex` must hold a principal; the event's views point into `ex` and `explain`.
inline audit::Event ExchangeEvent(const pipeline::Exchange& ex, audit::EventKind kind, bool allowed,
                                  absl::FunctionRef<std::string()> explain, const Clock& clock) {
  return {.kind = kind,
          .allowed = allowed,
          .time_us = clock.UnixMicros(),
          .principal = ex.principal->id,
          .tenant = ex.principal->tenant,
          .action = ex.action,
          .resource = ex.resource,
          .request_id = ex.request_id,
          .remote = ex.remote,
          .explain = explain};
}

}  // namespace pillar::stages
