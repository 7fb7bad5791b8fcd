#include "pipeline/chain.h"

#include <cstdio>
#include <cstdlib>

namespace pillar::pipeline {

Chain::Chain(std::vector<std::unique_ptr<Stage>> stages, monitor::MetricsRegistry* metrics,
             Clock& clock)
    : stages_(std::move(stages)), clock_(clock) {
  if (stages_.size() > kMaxStages) {
    std::fprintf(stderr, "pillar: a chain holds at most %zu stages\n", kMaxStages);
    std::abort();  // a wiring bug, not input
  }
  monitor::Family<monitor::Histogram>* family = nullptr;
  if (metrics != nullptr) {
    family = &metrics->AddHistogram("pillar_stage_duration_seconds",
                                    "Time spent in each stage of the request path.", {"stage"},
                                    monitor::LatencyBuckets());
  }
  for (const auto& stage : stages_) {
    stage_seconds_.push_back(family ? &family->Get({stage->name()}) : nullptr);
    times_response_.push_back(stage->TimesResponse());
  }
}

void Chain::Start(Exchange& ex) {
  ex.chain_ = this;
  ex.next_stage_ = 0;
  RunForward(ex);
}

void Chain::RunForward(Exchange& ex) {
  // One clock reading per stage boundary: the end of a stage is the start of the next.
  int64_t start = clock_.MonotonicNanos();
  while (ex.next_stage_ < stages_.size()) {
    const size_t i = ex.next_stage_;
    ex.suspended_at_ns_ = start;
    StageResult result = stages_[i]->OnRequest(ex);
    if (result == StageResult::kSuspend) return;  // the stage owns the next move
    const int64_t now = clock_.MonotonicNanos();
    ex.stage_ns[i] += now - start;
    start = now;
    ex.next_stage_ = i + 1;
    if (result == StageResult::kStop) break;
  }
  Finish(ex, start);
}

void Chain::Resume(Exchange& ex, StageResult result) {
  const int64_t now = clock_.MonotonicNanos();
  const size_t i = ex.next_stage_;
  ex.stage_ns[i] += now - ex.suspended_at_ns_;
  ex.next_stage_ = i + 1;
  if (result == StageResult::kStop) {
    Finish(ex, now);
  } else {
    RunForward(ex);
  }
}

void Chain::Finish(Exchange& ex, int64_t now) {
  for (size_t i = ex.next_stage_; i-- > 0;) {
    stages_[i]->OnResponse(ex);
    if (!times_response_[i]) continue;
    const int64_t after = clock_.MonotonicNanos();
    ex.stage_ns[i] += after - now;
    now = after;
  }
  for (size_t i = 0; i < ex.next_stage_; ++i) {
    if (stage_seconds_[i] != nullptr) stage_seconds_[i]->Observe(double(ex.stage_ns[i]) * 1e-9);
  }
  auto done = std::move(ex.on_complete);
  std::move(done)(ex);
}

}  // namespace pillar::pipeline
