// Stage: observe. First in the chain so that its response half runs last and sees everything:
// it counts in-flight requests, then records the outcome, the latencies (whole request, queue,
// compute, and pillar's own overhead), a language model's tokens (by model, tenant and key),
// time to first token and token rate, and writes the access log line (with the tokens, which
// `pillar usage` adds up for chargeback).
#pragma once

#include <atomic>

#include "common/clock.h"
#include "monitor/access_log.h"
#include "monitor/metrics.h"
#include "pipeline/stage.h"

namespace pillar::stages {

class ObserveStage final : public pipeline::Stage {
 public:
  ObserveStage(monitor::MetricsRegistry& metrics, monitor::AccessLog& access_log,
               Clock& clock = SystemClock());
  std::string_view name() const override { return "observe"; }
  pipeline::StageResult OnRequest(pipeline::Exchange& ex) override;
  void OnResponse(pipeline::Exchange& ex) override;
  bool TimesResponse() const override { return true; }

  // The outcome label for an HTTP status: success, invalid, unauthenticated, forbidden,
  // not_found, overloaded, error.
  static std::string_view Outcome(int status);
  static std::string_view OperationName(pipeline::Operation op);

 private:
  // The series of one version's metrics, kept by the version (runtime::ModelVersion::KeptBy).
  class VersionSeries;
  // The version's series; null only if another stage keeps the version's (one stage does).
  VersionSeries* SeriesOf(const runtime::ModelVersion& version);
  // A language model's call that was answered: its tokens, time to first token, token rate.
  void ObserveTokens(const pipeline::Exchange& ex, int64_t total_ns, bool answered);
  // The request's access-log line, with what OnResponse found out.
  struct Logged {
    int64_t total_ns;
    std::string_view operation;
    std::string_view outcome;
    std::string_view version;  // of the model served; empty when none was
    bool ran;                  // an inference that ran in a batch
    bool charged;              // a language model's call charged in tokens
    bool answered;
  };
  void Log(const pipeline::Exchange& ex, const Logged& what);

  monitor::Family<monitor::Counter>& requests_;
  monitor::Family<monitor::Histogram>& duration_;
  monitor::Family<monitor::Histogram>& queue_;
  monitor::Family<monitor::Histogram>& compute_;
  monitor::Family<monitor::Counter>& shed_;
  monitor::Histogram& overhead_;
  monitor::Family<monitor::Counter>& tokens_;
  monitor::Family<monitor::Histogram>& first_token_;
  monitor::Family<monitor::Histogram>& token_rate_;
  monitor::Gauge& in_flight_;
  monitor::AccessLog& access_log_;
  Clock& clock_;
};

}  // namespace pillar::stages
