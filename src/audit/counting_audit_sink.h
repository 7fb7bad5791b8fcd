// An AuditSink that counts decisions in pillar_security_decisions_total{kind,decision} and, when
// given a second sink, forwards every event to it (and its answer).
#pragma once

#include "audit/audit_sink.h"
#include "monitor/metrics.h"

namespace pillar::audit {

class CountingAuditSink final : public AuditSink {
 public:
  CountingAuditSink(monitor::MetricsRegistry& metrics, AuditSink* next = nullptr);
  bool Record(const Event& event) override;

 private:
  monitor::Counter* counters_[kEventKinds][2];  // [kind][allowed]
  AuditSink* next_;
};

}  // namespace pillar::audit
