// Stage: admit (R-SEC-8, R-REL-1). Finds the policy's limits that apply to the request, asks
// the limiter to take their charges, and answers a refusal with 429, Retry-After and the
// RateLimit-Limit / -Remaining / -Reset headers; an exhausted quota's body says which quota
// and when it renews. Every decision goes to the audit sink. It runs after decode, because a
// limit on tensor elements needs the decoded shapes; decode is bounded by the HTTP body limit.
//
// When the limiter cannot decide (its Redis is down) the stage fails closed (503) or, given a
// fallback limiter, lets that decide (fail open to a local limit at 1/N), counting each case.
#pragma once

#include "absl/container/inlined_vector.h"
#include "audit/audit_sink.h"
#include "common/clock.h"
#include "limits/limiter.h"
#include "monitor/metrics.h"
#include "pipeline/stage.h"

namespace pillar::stages {

class AdmitStage final : public pipeline::Stage {
 public:
  // `fallback` may be null (fail closed). `metrics` may be null. `clock` stamps audit events
  // (the limiters keep their own clocks for their windows).
  AdmitStage(limits::Limiter& limiter, limits::Limiter* fallback, audit::AuditSink& audit,
             monitor::MetricsRegistry* metrics, const Clock& clock = SystemClock());
  std::string_view name() const override { return "admit"; }
  pipeline::StageResult OnRequest(pipeline::Exchange& ex) override;
  void OnResponse(pipeline::Exchange& ex) override;
  bool TimesResponse() const override { return true; }

  using Charges = absl::InlinedVector<limits::Charge, 8>;
  // The charges the policy's limits put on this request (exposed for tests and benchmarks).
  static void CollectCharges(const pipeline::Exchange& ex, Charges& out);

 private:
  // Applies a verdict (or the limiter's failure) to the exchange; true when admitted.
  bool Decide(pipeline::Exchange& ex, const Charges& charges,
              absl::StatusOr<limits::Verdict> verdict);
  // `by_principal`: the refusing charge counted a principal without a tenant (Charge).
  void Refuse(pipeline::Exchange& ex, const limits::Verdict& verdict, bool by_principal);
  void Record(pipeline::Exchange& ex, bool allowed);
  void HoldSlots(pipeline::Exchange& ex, const Charges& charges, limits::Limiter& by);

  limits::Limiter& limiter_;
  limits::Limiter* fallback_;
  audit::AuditSink& audit_;
  const Clock& clock_;
  monitor::Counter* unavailable_ = nullptr;
  monitor::Counter* fell_back_ = nullptr;
};

}  // namespace pillar::stages
