#include "audit/counting_audit_sink.h"

namespace pillar::audit {

std::string_view EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kAuthentication:
      return "authentication";
    case EventKind::kAuthorization:
      return "authorization";
    case EventKind::kLimit:
      return "limit";
    case EventKind::kModel:
      return "model";
    case EventKind::kKey:
      return "key";
    case EventKind::kPolicy:
      return "policy";
    case EventKind::kContent:
      return "content";
  }
  return "unknown";
}

std::string_view DecisionName(EventKind kind, bool allowed) {
  switch (kind) {
    case EventKind::kAuthentication:
    case EventKind::kAuthorization:
    case EventKind::kLimit:
    case EventKind::kContent:
      return allowed ? "allow" : "deny";
    case EventKind::kModel:
    case EventKind::kKey:
    case EventKind::kPolicy:
      break;
  }
  return allowed ? "ok" : "failed";
}

CountingAuditSink::CountingAuditSink(monitor::MetricsRegistry& metrics, AuditSink* next)
    : next_(next) {
  auto& family = metrics.AddCounter("pillar_security_decisions_total",
                                    "Audited decisions and changes by kind: authentication, "
                                    "authorization, limit, model, key, policy.",
                                    {"kind", "decision"});
  for (int kind = 0; kind < kEventKinds; ++kind) {
    for (int allowed = 0; allowed < 2; ++allowed) {
      counters_[kind][allowed] =
          &family.Get({EventKindName(EventKind(kind)), DecisionName(EventKind(kind), allowed)});
    }
  }
}

bool CountingAuditSink::Record(const Event& event) {
  counters_[int(event.kind)][event.allowed ? 1 : 0]->Increment();
  return next_ == nullptr || next_->Record(event);
}

}  // namespace pillar::audit
