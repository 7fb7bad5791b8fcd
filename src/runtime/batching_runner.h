// The dynamic batcher: requests for one model version wait in a bounded queue; each instance
// thread takes up to max_batch_size rows, waiting at most max_queue_delay_us after the oldest
// request for others to join, runs them as one batch and splits the outputs back.
// With batching.adaptive_delay (the default) an instance waits for company only while another
// instance is executing, i.e. while the model is under load and more requests are on their way:
// an idle model runs a lone request at once, and a loaded one still batches what queues up.
// A lone request for an idle model whose batches are measured to take at most kInlineBudgetNs,
// and whose own input is small enough to stay within it at the measured cost per byte, runs on
// the caller's thread (an event loop), on an instance claimed for it: the two thread hand-offs
// (to an instance's thread and back) cost more than such a model's execution. Not while requests
// arrive faster than a batch runs (the mean gap between arrivals under the mean batch time):
// then the next ones would queue behind each lone run, and running them together costs one
// execution instead of one each.
//
//   BatchingRunner runner(config, std::move(instances), SystemClock(), &batch_size_histogram);
//   runner.Infer(std::move(request), std::move(done));
// On an event loop's thread (the HTTP server's), a request is queued and the model is called at
// the end of that turn of the loop: the requests whose bytes arrived together are queued by then
// and go as one batch, run there on the loop when an instance is idle and the model fast (as a
// lone request above, within the same budget), or handed to the instances' threads. Woken at
// each arrival, an idle instance took the first request alone and the rest after its run.
// A full queue refuses at once with Unavailable and a Retry-After estimate. Destruction fails
// every queued request with Unavailable and joins the instance threads.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/event_loop.h"
#include "models/model_config.h"
#include "monitor/metrics.h"
#include "runtime/backend.h"
#include "runtime/return_promises.h"
#include "runtime/runner.h"

namespace pillar::runtime {

class BatchingRunner final : public Runner {
 public:
  // The longest mean batch time of a model that runs lone requests inline, and how many batches
  // must be measured first.
  static constexpr int64_t kInlineBudgetNs = 200'000;
  static constexpr int64_t kMeasuredBeforeInline = 16;
  // The largest input (all tensors' bytes) a lone request may have to run inline.
  static constexpr size_t kInlineMaxBytes = 64 << 10;
  // A run this long of a batch that ran inline, or was small enough to, stops inline runs for a
  // while (inline_stopped_until_ns_).
  static constexpr int64_t kInlineOverrunNs = 4 * kInlineBudgetNs;

  // `batch_sizes` (may be null) observes the rows of every executed batch; held for the runner's
  // life (a series of monitor::Family::Hold leaves /metrics with it).
  BatchingRunner(models::ModelConfig config, std::vector<std::unique_ptr<Backend>> instances,
                 Clock& clock, std::shared_ptr<monitor::Histogram> batch_sizes = nullptr);
  ~BatchingRunner() override;
  BatchingRunner(const BatchingRunner&) = delete;
  BatchingRunner& operator=(const BatchingRunner&) = delete;

  void Infer(protocol::InferenceRequest request, InferCallback done) override;
  bool Ready() const override { return true; }

 private:
  struct Pending {
    protocol::InferenceRequest request;
    InferCallback done;
    int64_t rows;
    int64_t enqueued_ns;
    bool promised = false;  // took a place kept for it (ReturnPromises)
  };

  // The queue's lock and the instances' wake-up, shared with the calls posted to event loops
  // (Infer), which may run after the runner is gone.
  struct Shared {
    absl::Mutex mu;
    absl::CondVar cv;
    BatchingRunner* runner ABSL_GUARDED_BY(mu) = nullptr;  // null once it is being destroyed
    // The loops a call is posted to that has not run yet: the requests a loop queues meanwhile
    // go with its call (or with another loop's, run first). One loop's long turn does not hold
    // another's requests back.
    std::vector<boost::asio::io_context*> posted_to ABSL_GUARDED_BY(mu);
  };
  // Queued from `loop`'s thread: runs or hands over what is queued at the end of this turn of
  // the loop. From any other thread (`loop` null): wakes the instances now. Unlocks mu_.
  void CallAfterThisTurn(boost::asio::io_context* loop) ABSL_UNLOCK_FUNCTION(mu_);
  // The call posted to `loop`: runs AtTurnEnd; destroyed unrun (its loop stopped for good),
  // it takes the loop off posted_to and wakes the instances for what was queued.
  class TurnEndCall;
  static void AtTurnEnd(Shared& shared, boost::asio::io_context* loop);
  // What is queued: run on this thread when an idle instance may (a batch within the inline
  // budget), else handed to the instances' threads.
  void RunOrWake() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void InstanceLoop(size_t instance);
  // Takes the next batch from the queue for `instance`, waiting for it to fill up to the
  // configured delay; empty when there is none for it (stopping, claimed for an inline run).
  std::vector<Pending> NextBatch(size_t instance) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the next batch from the front of the queue: the first request and those after it that
  // share its shape, up to max_batch_size rows and `max_bytes` of input; empty when the first
  // is larger than that.
  std::vector<Pending> TakeBatch(size_t max_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The instance a batch may run on inline now, on the caller's thread; none when the model is
  // busy, is not measured fast, or has no instance that may. And the most input it may have.
  std::optional<size_t> IdleFastInstance() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t InlineBytes() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The instance a lone request queued off a loop may run on inline now: as above, and the
  // queue is empty and requests do not come faster than a batch runs.
  std::optional<size_t> InlineInstance(const Pending& pending) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `batch` on `instance` on this thread (mu_ released meanwhile), claimed from its own.
  void RunInline(size_t instance, std::vector<Pending> batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers the requests whose caller's deadline passed while they queued, and removes them: no
  // computation for nobody.
  void DropExpired(std::vector<Pending>& batch);
  // Runs `batch` on `instance`, which is counted busy (and claimed, for an inline run) until
  // its execution ends, then answers each request.
  void RunBatch(size_t instance, std::vector<Pending>& batch) ABSL_LOCKS_EXCLUDED(mu_);
  // One request's part of a batch's outputs: rows [first_row, first_row + rows) of those it
  // asked for (all of them when `whole`, the batch being its alone).
  std::vector<protocol::Tensor> RowsOf(const std::vector<protocol::Tensor>& outputs,
                                       const std::vector<std::string>& requested, int64_t first_row,
                                       int64_t rows, bool whole) const;
  // How long a request queued behind `ahead` others would take to be answered (the batches ahead
  // of it, then its own), from the measured batch time.
  int64_t EstimatedWaitNanos(size_t ahead) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t EstimatedWaitSeconds() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The Retry-After for shedding `request` (estimated at `estimate_s`): a booked place when one
  // is left (ReturnPromises).
  int64_t RetryAfter(const protocol::InferenceRequest& request, int64_t estimate_s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Notes the batch time, and that `instance` is idle again.
  void EndExecution(size_t instance, int64_t ns, size_t input_bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Why `request` may not queue now behind `ahead` others (unloading, its class's share of the
  // queue is full, its estimated wait ends past its deadline); none when it may.
  std::optional<absl::Status> Refusal(const protocol::InferenceRequest& request, size_t ahead)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const models::ModelConfig config_;
  std::vector<std::unique_ptr<Backend>> instances_;
  Clock& clock_;
  const std::shared_ptr<monitor::Histogram> batch_sizes_;

  const std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  absl::Mutex& mu_ = shared_->mu;
  absl::CondVar& cv_ = shared_->cv;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queued_rows_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Mean nanoseconds to run one batch, for wait estimates.
  double mean_batch_ns_ ABSL_GUARDED_BY(mu_) = 1e6;
  // Mean nanoseconds per input byte of a batch, for the size of what may run inline.
  double mean_byte_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t batches_measured_ ABSL_GUARDED_BY(mu_) = 0;
  // The budget is a mean, not a bound on one run (review helper-118): a request small enough to
  // run inline but slow to compute holds its loop, and every connection on it, for its whole
  // run, and a rare one moves the mean for a few batches only. A run of kInlineOverrunNs or
  // more stops inline runs for kSlowStopFactor times its length, by the clock: so slow inline
  // runs hold a loop 1/21 of the time at most, however many cheap requests come between them
  // (a stop counted in batches was walked through by them: review helper-119). Measured on the
  // wall clock, which is all this VM gives: a thread's CPU clock counts the time the host takes
  // (0.6-5.6 ms in a 10 s spin) and costs 1.3 us a reading. The host's pauses (runs of 0.8-4.4
  // ms, one batch in 2,400 at 64 connections to the demo's model, one in 19,000 at one) each
  // stop inline runs for 16-88 ms.
  static constexpr int64_t kSlowStopFactor = 20;
  int64_t inline_stopped_until_ns_ ABSL_GUARDED_BY(mu_) = 0;
  // Mean nanoseconds between arrivals (each gap counted at most kMaxGapNs, so that a load
  // after a quiet spell is seen within a few hundred requests), and the last arrival.
  static constexpr int64_t kMaxGapNs = 1'000'000;
  double mean_gap_ns_ ABSL_GUARDED_BY(mu_) = kMaxGapNs;
  int64_t last_arrival_ns_ ABSL_GUARDED_BY(mu_) = 0;
  // Instances executing a batch now, inline runs included, for the adaptive wait.
  int busy_instances_ ABSL_GUARDED_BY(mu_) = 0;
  // By instance: running a request inline on a caller's thread (its own thread leaves it be).
  std::vector<bool> claimed_ ABSL_GUARDED_BY(mu_);
  int inline_runs_ ABSL_GUARDED_BY(mu_) = 0;  // in progress, waited for by the destructor
  // Places kept for the callers this queue told to come back.
  ReturnPromises promises_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace pillar::runtime
