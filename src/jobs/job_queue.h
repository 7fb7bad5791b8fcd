// Asynchronous inference jobs: a request sent with `Prefer: respond-async` is accepted at once
// (202 and a job URL) and run later through the same chain of stages as any request, as the
// principal that submitted it. Jobs live in the state store, which is the queue: an instance
// claims due jobs under a lease it renews while they run, so a job whose instance stopped or died
// is taken again when the lease runs out (by a restarted instance, or another sharing the
// store). A run cut short is run again only for an idempotent model; otherwise the job fails,
// saying so. Runs refused as load (429, 503) are retried with backoff, up to max_attempts.
//
//   JobQueue jobs(store, options, metrics);
//   jobs.Attach(chain);        // the chain runs the jobs; it is built with the job stage in it
//   jobs.Start();
//   ... jobs.Submit(record, done); jobs.Lookup(id, owners, done);   // from the job stage
//   jobs.Stop(drain_timeout);  // waits for runs in flight, then gives their claims up
// One thread does the store's I/O and drives the runs' exchanges (their `post` executor), so
// nothing here blocks an event loop. Submit and Lookup may be called from any thread; their
// callbacks run on the queue's thread.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "jobs/fetch_budget.h"
#include "jobs/job_options.h"
#include "jobs/payload_sealer.h"
#include "monitor/metrics.h"
#include "pipeline/chain.h"
#include "state/state_store.h"

namespace pillar::jobs {

class JobQueue {
 public:
  // `sealer` seals every job's request and result in the store (jobs/payload_sealer.h).
  JobQueue(state::StateStore& store, JobOptions options,
           std::shared_ptr<const PayloadSealer> sealer, monitor::MetricsRegistry& metrics,
           const Clock& clock = SystemClock());
  ~JobQueue();
  JobQueue(const JobQueue&) = delete;
  JobQueue& operator=(const JobQueue&) = delete;

  // The chain that runs the jobs; before Start, and it must outlive Stop.
  void Attach(pipeline::Chain& chain) { chain_ = &chain; }
  void Start();
  // Takes no new jobs from the store (runs in flight go on); the first step of stopping.
  void StopClaiming() { claiming_ = false; }
  // Stops claiming, waits at most `drain` for the runs in flight, then gives up the claims of
  // any still running (the next instance to claim them treats them as interrupted).
  void Stop(absl::Duration drain);

  // Stores `job` (the caller fills in id, owner, principal, model, version, request, priority and
  // idempotent) as queued. ResourceExhausted when its owner has too many unfinished jobs.
  void Submit(state::JobRecord job, absl::AnyInvocable<void(absl::Status) &&> done);
  // A job as Lookup found it, and what its answer holds of the fetch budget
  // (jobs/fetch_budget.h): to be kept in the answer (http::Response::held) until it is written.
  struct Found {
    state::JobRecord job;
    std::shared_ptr<HeldBytes> held;
  };
  // The job `id` when one of `owners` submitted it (the principal asking, then the keys it
  // succeeds: identity::Principal::succeeds); NotFound, alike, when it does not exist or is
  // another's. The request body is not returned. ResourceExhausted, at once, when the principal
  // asking has max_fetches_per_principal fetches going; Unavailable when its result does not fit
  // in what results being sent may hold now (both are worth a retry in a moment).
  void Lookup(std::string id, std::vector<std::string> owners,
              absl::AnyInvocable<void(absl::StatusOr<Found>) &&> done);

  // The expected wait, in ms, of a job with `queued_ahead` jobs before it, from the measured
  // run time and the number of workers; -1 before any run was measured.
  int64_t EstimatedWaitMs(int64_t queued_ahead) const;
  const JobOptions& options() const { return options_; }
  const PayloadSealer& sealer() const { return *sealer_; }

 private:
  using Task = absl::AnyInvocable<void() &&>;
  // The queue's work: tasks posted from any thread. Shared with the exchanges of runs, which
  // may post to it after Stop (a runner answering late); it drops those.
  struct Tasks {
    absl::Mutex mu;
    std::deque<Task> queue ABSL_GUARDED_BY(mu);
    bool closed ABSL_GUARDED_BY(mu) = false;
    bool wake ABSL_GUARDED_BY(mu) = false;
    void Post(Task task);
  };
  struct Run {
    int64_t attempts = 0;
    std::string owner;  // what its result is sealed for
    bool idempotent = true;
    std::string model;
    int64_t started_ns = 0;
  };

  // Holds `bytes` of a result being sent for `ticket`; what to answer when they do not fit.
  [[nodiscard]] absl::Status HoldResult(FetchBudget::Ticket& ticket, int64_t bytes);
  void Loop();
  void Tick(int64_t now_us);
  // Renews the running jobs' claims when a third of the lease has passed since the last time.
  void RenewIfDue(int64_t now_us);
  void Claim(int64_t now_us);
  void StartRun(state::JobRecord job, int64_t now_us);
  // Ends a run that never reached the chain, as failed with `status`.
  void FailUnrun(const state::JobRecord& job, const absl::Status& status, int64_t now_us);
  void EndRun(const std::string& id, int64_t attempts, pipeline::Exchange& done);
  void EndOverdueRuns(int64_t now_us);
  void End(state::JobRecord end, std::string_view model, std::string_view outcome);
  void RefreshGauges();
  void Report(const absl::Status& status);
  // A finished job's result as its owner gets it: opened (jobs/payload_sealer.h), or, when it
  // does not open, a 500 with a message made here.
  state::JobRecord OpenResult(state::JobRecord job);
  // What a job's sealed request and result are bound to (besides its id): who owns it and who
  // it runs as, and what the answer says of itself.
  static std::string RequestBinding(const state::JobRecord& job);
  static std::string ResultBinding(const state::JobRecord& job);

  state::StateStore& store_;
  const std::shared_ptr<const PayloadSealer> sealer_;
  const JobOptions options_;
  const Clock& clock_;
  pipeline::Chain* chain_ = nullptr;
  std::shared_ptr<Tasks> tasks_ = std::make_shared<Tasks>();
  const std::shared_ptr<FetchBudget> fetches_;
  std::thread thread_;
  std::atomic<bool> claiming_{false};
  std::atomic<int64_t> running_count_{0};
  std::atomic<double> run_ms_{-1};  // moving average of run times; -1: none measured yet

  // Touched on the queue's thread only.
  std::map<std::string, Run> running_;
  int64_t next_renew_us_ = 0;
  int64_t next_claim_us_ = 0;
  int64_t next_sweep_us_ = 0;
  int64_t next_gauges_us_ = 0;
  bool claim_now_ = true;
  std::string last_error_;
  std::map<std::pair<std::string, std::string>, bool> gauge_labels_;

  monitor::Family<monitor::Gauge>& jobs_;        // {model, state}
  monitor::Family<monitor::Counter>& finished_;  // {model, outcome}
  monitor::Family<monitor::Counter>& store_errors_;
  monitor::Gauge& sending_;
};

}  // namespace pillar::jobs
