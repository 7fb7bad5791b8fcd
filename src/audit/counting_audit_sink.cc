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
  }
  return "unknown";
}

CountingAuditSink::CountingAuditSink(monitor::MetricsRegistry& metrics, AuditSink* next)
    : next_(next) {
  auto& family = metrics.AddCounter("pillar_security_decisions_total",
                                    "Authentication, authorization, limit and model-integrity decisions.",
                                    {"kind", "decision"});
  for (int kind = 0; kind < kEventKinds; ++kind) {
    for (int allowed = 0; allowed < 2; ++allowed) {
      counters_[kind][allowed] =
          &family.Get({EventKindName(EventKind(kind)), allowed ? "allow" : "deny"});
    }
  }
}

void CountingAuditSink::Record(const Event& event) {
  counters_[int(event.kind)][event.allowed ? 1 : 0]->Increment();
  if (next_ != nullptr) next_->Record(event);
}

}  // namespace pillar::audit
