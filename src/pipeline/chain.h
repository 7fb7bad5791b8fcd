// The fixed chain of stages every request passes through, with each stage's time recorded in
// the Exchange and in pillar_stage_duration_seconds{stage}.
//
//   Chain chain(std::move(stages), &metrics);
//   ex.on_complete = [](Exchange& ex) { Send(ex.response); };
//   chain.Start(ex);
// Thread-safe: the chain itself is immutable; each Exchange is driven by one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "monitor/metrics.h"
#include "pipeline/stage.h"

namespace pillar::pipeline {

class Chain {
 public:
  // `metrics` may be null (tests).
  Chain(std::vector<std::unique_ptr<Stage>> stages, monitor::MetricsRegistry* metrics,
        Clock& clock = SystemClock());
  Chain(const Chain&) = delete;
  Chain& operator=(const Chain&) = delete;

  void Start(Exchange& ex);
  // Called by a stage that returned kSuspend, on the exchange's executor, with what it decided.
  void Resume(Exchange& ex, StageResult result);

 private:
  void RunForward(Exchange& ex);
  void Finish(Exchange& ex, int64_t now);

  std::vector<std::unique_ptr<Stage>> stages_;
  std::vector<monitor::Histogram*> stage_seconds_;
  std::vector<bool> times_response_;  // Stage::TimesResponse, per stage
  Clock& clock_;
};

}  // namespace pillar::pipeline
