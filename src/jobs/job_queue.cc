#include "jobs/job_queue.h"

#include <algorithm>
#include <cstdio>

#include "common/json_writer.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "identity/principal_codec.h"

namespace pillar::jobs {

using state::JobRecord;
using state::JobState;

namespace {

constexpr int64_t kSweepIntervalUs = 60'000'000;
constexpr int64_t kGaugeIntervalUs = 2'000'000;
constexpr int64_t kMaxBackoffUs = 30'000'000;
// How soon a run held back by a concurrency limit is tried again.
constexpr int64_t kHeldBackUs = 500'000;

int64_t Micros(absl::Duration d) { return absl::ToInt64Microseconds(d); }

// The response headers a finished job keeps: those that say who answered and how to retry.
std::string KeptHeaders(const http::Response& response) {
  std::string out;
  for (const auto& [name, value] : response.headers) {
    if (EqualsIgnoreCase(name, "X-Pillar-Fallback") || EqualsIgnoreCase(name, "Retry-After")) {
      StrAppend(&out, name, ": ", value, "\n");
    }
  }
  return out;
}

// How long a run refused as load waits before the next: the upstream's Retry-After when it
// gave one, else 1 s doubling per attempt; capped.
int64_t BackoffUs(const http::Response& response, int64_t attempts) {
  for (const auto& [name, value] : response.headers) {
    int64_t seconds = 0;
    if (EqualsIgnoreCase(name, "Retry-After") && ParseInt(value, &seconds) && seconds >= 0) {
      return std::min(seconds * 1'000'000, kMaxBackoffUs);
    }
  }
  return std::min<int64_t>(1'000'000LL << std::min<int64_t>(attempts - 1, 5), kMaxBackoffUs);
}

}  // namespace

void JobQueue::Tasks::Post(Task task) {
  absl::MutexLock lock(&mu);
  if (closed) return;  // the queue stopped: the task (a late answer) is dropped
  queue.push_back(std::move(task));
}

JobQueue::JobQueue(state::StateStore& store, JobOptions options,
                   std::shared_ptr<const PayloadSealer> sealer, monitor::MetricsRegistry& metrics,
                   const Clock& clock)
    : store_(store),
      sealer_(std::move(sealer)),
      options_(options),
      clock_(clock),
      fetches_(FetchBudget::Create(options.max_fetches_per_principal,
                                   options.max_result_bytes_in_flight)),
      jobs_(metrics.AddGauge("pillar_jobs", "Asynchronous jobs in the state store, by state.",
                             {"model", "state"})),
      finished_(metrics.AddCounter("pillar_jobs_finished_total",
                                   "Asynchronous job runs this instance ended, by outcome "
                                   "(done, failed, retried, held_back: its concurrency limit was "
                                   "full, lost: the claim had lapsed).",
                                   {"model", "outcome"})),
      store_errors_(metrics.AddCounter("pillar_job_store_errors_total",
                                       "State store operations of the job queue that failed.")),
      sending_(metrics
                   .AddGauge("pillar_job_result_bytes_sending",
                             "Bytes of finished jobs' results being sent, held against "
                             "[jobs] max_result_bytes_in_flight (every 2 s).")
                   .Get({})) {}

JobQueue::~JobQueue() { Stop(absl::ZeroDuration()); }

void JobQueue::Start() {
  claiming_ = true;
  thread_ = std::thread([this] {
    NameThisThread("jobs");
    Loop();
  });
}

void JobQueue::Stop(absl::Duration drain) {
  if (!thread_.joinable()) return;
  claiming_ = false;
  const int64_t deadline = clock_.MonotonicNanos() + absl::ToInt64Nanoseconds(drain);
  while (running_count_.load() > 0 && clock_.MonotonicNanos() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  tasks_->Post([this] {
    // Runs still going: give their claims up, so the next claim comes at once, as interrupted.
    std::vector<std::pair<std::string, int64_t>> claims;
    for (const auto& [id, run] : running_) claims.emplace_back(id, run.attempts);
    Report(store_.RenewJobs(claims, 0));
    absl::MutexLock lock(&tasks_->mu);
    tasks_->closed = true;
  });
  thread_.join();
}

void JobQueue::Submit(JobRecord job, absl::AnyInvocable<void(absl::Status) &&> done) {
  tasks_->Post([this, job = std::move(job), done = std::move(done)]() mutable {
    const int64_t now_us = clock_.UnixMicros();
    job.state = JobState::kQueued;
    job.created_us = job.updated_us = now_us;
    job.request = sealer_->Seal(job.id, "request", job.request, RequestBinding(job));
    absl::Status stored = store_.PutJob(job, QuotaOf(options_));
    if (stored.ok()) claim_now_ = true;
    if (!stored.ok() && stored.code() != absl::StatusCode::kResourceExhausted) Report(stored);
    std::move(done)(std::move(stored));
  });
}

void JobQueue::Lookup(std::string id, std::vector<std::string> owners,
                      absl::AnyInvocable<void(absl::StatusOr<Found>) &&> done) {
  // Taken before the lookup is queued: one principal's reads cannot fill the queue's thread.
  std::shared_ptr<FetchBudget::Ticket> ticket =
      owners.empty() ? nullptr : fetches_->Enter(owners.front());
  if (ticket == nullptr) {
    std::move(done)(absl::ResourceExhaustedError(
        StrCat("this principal has ", options_.max_fetches_per_principal,
               " fetches of its jobs going; retry when one is done")));
    return;
  }
  tasks_->Post([this, id = std::move(id), owners = std::move(owners), done = std::move(done),
                ticket = std::move(ticket)]() mutable {
    // The result's size first, from the row's header: a fetch refused for want of room costs no
    // read and no opening of its result (review helper-134: refusals of a 7 MB result took 18 ms
    // each of this thread).
    int64_t held = 0;
    if (absl::StatusOr<int64_t> stored = store_.OwnedJobResultBytes(id, owners);
        stored.ok() && *stored > 0) {
      if (absl::Status refused = HoldResult(*ticket, *stored); !refused.ok()) {
        std::move(done)(std::move(refused));
        return;
      }
      held = *stored;
    }
    absl::StatusOr<JobRecord> job = store_.GetOwnedJob(id, owners);
    if (!job.ok() && job.status().code() != absl::StatusCode::kNotFound) Report(job.status());
    // Past its keep time a finished job is gone, whether or not the sweep (once a minute)
    // has deleted it yet (found by review helper-67: results were served up to a minute
    // past keep_ms).
    if (job.ok() && (job->state == JobState::kDone || job->state == JobState::kFailed) &&
        job->expires_us <= clock_.UnixMicros()) {
      job = absl::NotFoundError(StrCat("no job ", id));
    }
    if (!job.ok()) {
      std::move(done)(job.status());
      return;
    }
    job->request.clear();
    *job = OpenResult(*std::move(job));
    // More than was held when the job ended between the two reads.
    if (const int64_t more = int64_t(job->result.size()) - held; more > 0) {
      if (absl::Status refused = HoldResult(*ticket, more); !refused.ok()) {
        std::move(done)(std::move(refused));
        return;
      }
    }
    std::move(done)(Found{*std::move(job), std::move(ticket)});
  });
}

absl::Status JobQueue::HoldResult(FetchBudget::Ticket& ticket, int64_t bytes) {
  switch (fetches_->Hold(ticket, bytes)) {
    case FetchBudget::Held::kYes:
      return absl::OkStatus();
    case FetchBudget::Held::kPastShare:
      return absl::ResourceExhaustedError(
          StrCat("this principal's job results being sent hold what one principal may (",
                 options_.max_result_bytes_in_flight / 4, " bytes); retry in a moment"));
    case FetchBudget::Held::kPastWhole:
      break;
  }
  return absl::UnavailableError(StrCat("job results being sent hold what they may (",
                                       options_.max_result_bytes_in_flight,
                                       " bytes); retry in a moment"));
}

namespace {

// What a sealed payload is bound to besides its job and field (jobs/payload_sealer.h): each
// part with its length, so that no two different sets of parts read alike.
std::string Bound(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) StrAppend(&out, p.size(), ":", p, ";");
  return out;
}

}  // namespace

std::string JobQueue::RequestBinding(const JobRecord& job) {
  return Bound({job.owner, job.principal, job.model, job.version});
}

std::string JobQueue::ResultBinding(const JobRecord& job) {
  return Bound({job.owner, std::to_string(job.status), job.content_type, job.headers});
}

JobRecord JobQueue::OpenResult(JobRecord job) {
  if (job.state != JobState::kDone && job.state != JobState::kFailed) return job;
  // A result past its owner's byte allowance is replaced, in the store, by a message saying so,
  // unsealed. Nothing of that row is served as it is (a writer of the store could put anything
  // there): the answer is made here.
  if (job.status == 507 && !job.result.starts_with(PayloadSealer::kMagic)) {
    job.content_type = "application/json";
    job.headers.clear();
    job.result =
        StrCat("{\"error\":\"the job's result would pass the ", options_.max_bytes_per_principal,
               " bytes its principal's jobs may keep; fetch or let earlier ones expire\"}");
    return job;
  }
  absl::StatusOr<std::string> result =
      sealer_->Open(job.id, "result", job.result, ResultBinding(job));
  if (!result.ok()) {
    // Answered 500 with a message made here (the row's own framing is not to be trusted), the
    // job's state still said (X-Pillar-Job-State).
    Report(result.status());
    JsonWriter w;
    w.BeginObject();
    w.Key("error");
    w.String(StrCat("job ", job.id, ": ", result.status().message()));
    w.EndObject();
    job.status = 500;
    job.content_type = "application/json";
    job.headers.clear();
    job.result = std::move(w).Take();
    return job;
  }
  job.result = std::move(*result);
  return job;
}

int64_t JobQueue::EstimatedWaitMs(int64_t queued_ahead) const {
  const double run_ms = run_ms_.load(std::memory_order_relaxed);
  if (run_ms < 0) return -1;
  // The jobs ahead drain `workers` at a time; then this one runs.
  return int64_t(run_ms * (double(queued_ahead / options_.workers) + 1.0));
}

void JobQueue::Loop() {
  for (;;) {
    std::deque<Task> batch;
    {
      absl::MutexLock lock(&tasks_->mu);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(tasks_->mu) {
        return !tasks_->queue.empty() || tasks_->closed;
      };
      tasks_->mu.AwaitWithTimeout(absl::Condition(&ready), options_.poll);
      if (tasks_->closed && tasks_->queue.empty()) return;
      batch.swap(tasks_->queue);
    }
    for (Task& task : batch) {
      std::move(task)();
      // Between tasks too: a long batch (lookups of large results) must not let the claims of
      // running jobs lapse, which would have another instance run them a second time.
      RenewIfDue(clock_.UnixMicros());
    }
    Tick(clock_.UnixMicros());
  }
}

void JobQueue::RenewIfDue(int64_t now_us) {
  if (now_us < next_renew_us_ || running_.empty()) return;
  next_renew_us_ = now_us + Micros(options_.lease) / 3;
  std::vector<std::pair<std::string, int64_t>> claims;
  for (const auto& [id, run] : running_) claims.emplace_back(id, run.attempts);
  Report(store_.RenewJobs(claims, now_us + Micros(options_.lease)));
}

void JobQueue::Tick(int64_t now_us) {
  if (now_us >= next_sweep_us_) {
    next_sweep_us_ = now_us + kSweepIntervalUs;
    Report(store_.DeleteExpiredJobs(now_us).status());
  }
  RenewIfDue(now_us);
  EndOverdueRuns(now_us);
  Claim(now_us);
  if (now_us >= next_gauges_us_) {
    next_gauges_us_ = now_us + kGaugeIntervalUs;
    RefreshGauges();
  }
}

void JobQueue::EndOverdueRuns(int64_t now_us) {
  // A run is given its deadline and a second for the chain's own answer; past that (a model that
  // hangs), the job fails and its worker is freed. The run's late answer, if any, is dropped.
  const int64_t limit_ns = absl::ToInt64Nanoseconds(options_.run_timeout) + 1'000'000'000;
  const int64_t now_ns = clock_.MonotonicNanos();
  for (auto it = running_.begin(); it != running_.end();) {
    if (now_ns - it->second.started_ns <= limit_ns) {
      ++it;
      continue;
    }
    JobRecord job;
    job.id = it->first;
    job.attempts = it->second.attempts;
    job.model = it->second.model;
    job.owner = it->second.owner;
    it = running_.erase(it);
    FailUnrun(job,
              absl::DeadlineExceededError(StrCat("the job's run did not end within ",
                                                 absl::FormatDuration(options_.run_timeout))),
              now_us);
  }
  running_count_ = int64_t(running_.size());
}

void JobQueue::Claim(int64_t now_us) {
  const int free = options_.workers - int(running_.size());
  if (!claiming_ || chain_ == nullptr || free <= 0) return;
  if (!claim_now_ && now_us < next_claim_us_) return;
  claim_now_ = false;
  next_claim_us_ = now_us + Micros(options_.poll);
  absl::StatusOr<std::vector<JobRecord>> claimed =
      store_.ClaimJobs(now_us, now_us + Micros(options_.lease), free);
  if (!claimed.ok()) return Report(claimed.status());
  // (The renewal schedule is left alone: pushing it back on each claim starved the renewal of
  // the runs already going, whose leases then lapsed under them.)
  for (JobRecord& job : *claimed) StartRun(std::move(job), now_us);
}

void JobQueue::StartRun(JobRecord job, int64_t now_us) {
  if (job.interrupted && !job.idempotent) {
    // It may or may not have run: not a 503, which clients read as "not done, safe to retry".
    return FailUnrun(job,
                     absl::InternalError(StrCat(
                         "the job's run was interrupted (its instance stopped or lost its claim) "
                         "and may or may not have happened; model '",
                         job.model,
                         "' (or a model of its fallback chain) is not idempotent, so it "
                         "was not run again")),
                     now_us);
  }
  if (job.attempts > options_.max_attempts) {  // e.g. a job whose runs keep killing its instance
    return FailUnrun(job,
                     absl::InternalError(StrCat("the job was begun ", job.attempts - 1,
                                                " times without an end; it is not run again")),
                     now_us);
  }
  if (now_us - job.created_us > Micros(options_.max_wait)) {
    return FailUnrun(
        job,
        absl::DeadlineExceededError(StrCat("the job waited longer than ",
                                           absl::FormatDuration(options_.max_wait), " to run")),
        now_us);
  }
  absl::StatusOr<identity::Principal> principal = identity::DecodePrincipal(job.principal);
  if (principal.ok() && principal->id != job.owner) {
    principal = absl::DataLossError("stored principal: not the job's owner");
  }
  if (!principal.ok()) return FailUnrun(job, principal.status(), now_us);
  auto* ex = new pipeline::Exchange;
  ex->request_id = StrCat(job.id.substr(0, 16), "-", job.attempts);
  ex->operation = pipeline::Operation::kInfer;
  ex->listener = "jobs";
  ex->method = "POST";
  ex->target = StrCat("/v2/models/", job.model, "/versions/", job.version, "/infer");
  absl::StatusOr<std::string> request =
      sealer_->Open(job.id, "request", job.request, RequestBinding(job));
  if (!request.ok()) return FailUnrun(job, request.status(), now_us);
  ex->body = std::move(*request);
  ex->model_name = job.model;
  ex->model_version = job.version;
  ex->remote = "job";
  ex->start_ns = clock_.MonotonicNanos();
  ex->timeout_ms = absl::ToInt64Milliseconds(options_.run_timeout);
  ex->priority = job.priority;
  ex->job_id = job.id;
  ex->job_run = true;
  ex->principal = std::make_shared<const identity::Principal>(std::move(*principal));
  ex->post = [tasks = tasks_](Task task) { tasks->Post(std::move(task)); };
  ex->on_complete = [this, id = job.id, attempts = job.attempts](pipeline::Exchange& done) {
    EndRun(id, attempts, done);
    delete &done;
  };
  running_[job.id] = Run{job.attempts, job.owner, job.idempotent, job.model, ex->start_ns};
  running_count_ = int64_t(running_.size());
  chain_->Start(*ex);  // may end at once (a refusal): EndRun then runs inside
}

void JobQueue::FailUnrun(const JobRecord& job, const absl::Status& status, int64_t now_us) {
  pipeline::Exchange failed;
  failed.Fail(status);
  JobRecord end;
  end.id = job.id;
  end.owner = job.owner;
  end.attempts = job.attempts;
  end.state = JobState::kFailed;
  end.updated_us = now_us;
  end.expires_us = now_us + Micros(options_.keep);
  end.status = failed.response.status;
  end.content_type = failed.response.content_type;
  end.result = std::move(failed.response.body);
  End(std::move(end), job.model, "failed");
}

void JobQueue::EndRun(const std::string& id, int64_t attempts, pipeline::Exchange& done) {
  auto it = running_.find(id);
  if (it == running_.end() || it->second.attempts != attempts) return;  // given up on already
  const Run run = std::move(it->second);
  running_.erase(it);
  running_count_ = int64_t(running_.size());
  const int64_t now_us = clock_.UnixMicros();
  const double ran_ms = double(clock_.MonotonicNanos() - run.started_ns) / 1e6;
  const double before = run_ms_.load(std::memory_order_relaxed);
  run_ms_.store(before < 0 ? ran_ms : 0.8 * before + 0.2 * ran_ms, std::memory_order_relaxed);

  const http::Response& response = done.response;
  JobRecord end;
  end.id = id;
  end.owner = run.owner;
  end.attempts = run.attempts;
  end.updated_us = now_us;
  if (done.held_back) {  // its concurrency limit was full: not run, so not an attempt
    end.state = JobState::kQueued;
    end.not_before_us = now_us + kHeldBackUs;
    end.refund_attempt = true;
    return End(std::move(end), run.model, "held_back");
  }
  const bool refused_as_load = response.status == 429 || response.status == 503;
  if (refused_as_load && run.idempotent && run.attempts < options_.max_attempts) {
    end.state = JobState::kQueued;
    end.not_before_us = now_us + BackoffUs(response, run.attempts);
    return End(std::move(end), run.model, "retried");
  }
  end.state = response.status < 400 ? JobState::kDone : JobState::kFailed;
  end.expires_us = now_us + Micros(options_.keep);
  end.status = response.status;
  end.content_type = response.content_type;
  end.headers = KeptHeaders(response);
  end.result = response.body;
  End(std::move(end), run.model, end.state == JobState::kDone ? "done" : "failed");
}

void JobQueue::End(JobRecord end, std::string_view model, std::string_view outcome) {
  if (end.state == JobState::kDone || end.state == JobState::kFailed) {
    end.result = sealer_->Seal(end.id, "result", end.result, ResultBinding(end));
  }
  absl::StatusOr<bool> ended = store_.EndJobRun(end, options_.max_bytes_per_principal);
  if (!ended.ok()) return Report(ended.status());
  finished_.Get({model, *ended ? outcome : "lost"}).Increment();
  claim_now_ = true;
}

void JobQueue::RefreshGauges() {
  sending_.Set(double(fetches_->bytes_held()));
  absl::StatusOr<std::vector<state::JobCount>> counts = store_.CountJobs();
  if (!counts.ok()) return Report(counts.status());
  for (auto& [labels, seen] : gauge_labels_) seen = false;
  for (const state::JobCount& c : *counts) {
    const std::string_view state = state::JobStateName(c.state);
    jobs_.Get({c.model, state}).Set(double(c.count));
    gauge_labels_[{c.model, std::string(state)}] = true;
  }
  for (const auto& [labels, seen] : gauge_labels_) {
    if (!seen) jobs_.Get({labels.first, labels.second}).Set(0);
  }
}

void JobQueue::Report(const absl::Status& status) {
  if (status.ok()) return;
  store_errors_.Get({}).Increment();
  std::string message(status.message());
  if (message == last_error_) return;  // said once until it changes
  std::fprintf(stderr, "pillar: jobs: %s\n", message.c_str());
  last_error_ = std::move(message);
}

}  // namespace pillar::jobs
