// The one interface to pillar's shared state. The embedded default is SQLite (one file, 0600);
// Redis and PostgreSQL implementations serve many instances later. It holds the API keys and
// the usage of quotas, high-water marks and asynchronous jobs. The schema is in
// docs/formats/api_keys.md.
//
//   std::unique_ptr<StateStore> store = *OpenSqliteStateStore("/var/lib/pillar/state.db");
//   PILLAR_RETURN_IF_ERROR(store->PutKey(record));
// Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pillar::state {

struct ApiKeyRecord {
  std::string id;           // public identifier, part of the key text
  std::string name;         // what the operator called it
  std::string secret_hash;  // SHA-256 of the secret; the secret itself is never stored
  int64_t created_us = 0;   // Unix microseconds
  std::optional<int64_t> revoked_us;
  // Lifecycle and identity (schema 2).
  std::string owner;  // the person or system responsible for the key
  std::string tenant;
  std::vector<std::string> roles;
  std::map<std::string, std::vector<std::string>> attributes;
  std::optional<int64_t> expires_us;
  std::optional<int64_t> last_used_us;
  std::string replaced_by;  // the key that a rotation made to succeed this one
};

// Usage of one quota counter in one period (the limiter's embedded persistence).
struct QuotaUsage {
  std::string counter;       // "<limit name>|<subject>"
  int64_t period_start = 0;  // Unix seconds, start of the UTC day or month
  int64_t used = 0;
};

// An asynchronous inference job (jobs/job_queue.h): the request as accepted, who made it, and
// once run, the response. The store is the queue: jobs are claimed by leases, so a job whose
// runner died is taken again when its lease runs out, by this instance or another.
enum class JobState { kQueued, kRunning, kDone, kFailed };
std::string_view JobStateName(JobState state);

struct JobRecord {
  std::string id;         // 128 random bits, hex
  std::string owner;      // the id of the principal that submitted it: the only one who sees it
  std::string principal;  // that principal, encoded (identity/principal_codec.h)
  std::string model;
  std::string version;  // the version the submission was routed to
  std::string request;  // the request body as accepted; never logged
  std::string priority;
  bool idempotent = true;  // whether a run cut short may be run again
  JobState state = JobState::kQueued;
  int64_t created_us = 0;
  int64_t updated_us = 0;
  int64_t not_before_us = 0;   // queued: not claimed before this time (a backoff)
  int64_t lease_until_us = 0;  // running: the claim holds until then
  int64_t attempts = 0;        // runs begun; a claim's identity
  int64_t expires_us = 0;      // finished: deleted after this time
  // The response, once finished.
  int status = 0;
  std::string content_type;
  std::string headers;  // "Name: value" lines
  std::string result;
  // Filled by GetJob for a queued job: queued jobs ahead of it. By ClaimJobs: true when the job
  // was running under a lease that ran out (its last run may or may not have happened).
  int64_t queued_ahead = 0;
  bool interrupted = false;
  // For EndJobRun: the run that ends did not count as an attempt (it was held back, not run).
  bool refund_attempt = false;
};

// What one owner may keep in the jobs table (PutJob refuses a job past any of them).
struct JobQuota {
  int64_t max_unfinished = 100;            // queued or running
  int64_t max_jobs = 10'000;               // in any state, finished ones included until they expire
  int64_t max_bytes = int64_t{256} << 20;  // request and result bytes, all its jobs together
};

struct JobCount {
  std::string model;
  JobState state = JobState::kQueued;
  int64_t count = 0;
};

class StateStore {
 public:
  virtual ~StateStore() = default;

  // AlreadyExists when the id is taken.
  [[nodiscard]] virtual absl::Status PutKey(const ApiKeyRecord& record) = 0;
  [[nodiscard]] virtual absl::StatusOr<std::vector<ApiKeyRecord>> ListKeys() = 0;
  // NotFound for an unknown id; revoking twice keeps the first time.
  [[nodiscard]] virtual absl::Status RevokeKey(const std::string& id, int64_t revoked_us) = 0;
  // A number that changes whenever any process changes the keys, so caches know to reload.
  [[nodiscard]] virtual absl::StatusOr<int64_t> KeysGeneration() = 0;
  // Adds `successor` and makes `id` expire at `old_expires_us` (or earlier, if it already
  // did), in one transaction. NotFound for an unknown id, FailedPrecondition for a revoked one.
  [[nodiscard]] virtual absl::Status RotateKey(const std::string& id, const ApiKeyRecord& successor,
                                               int64_t old_expires_us) = 0;
  // Records last-used times (never moving one backwards). Does not change the generation:
  // it is bookkeeping, not a change of who may call.
  [[nodiscard]] virtual absl::Status TouchKeys(
      const std::vector<std::pair<std::string, int64_t>>& last_used) = 0;

  // Quota usage: adds deltas (creating counters), and reads the counters of periods that
  // started at or after `since`.
  [[nodiscard]] virtual absl::Status AddQuotaUsage(const std::vector<QuotaUsage>& deltas) = 0;
  [[nodiscard]] virtual absl::StatusOr<std::vector<QuotaUsage>> LoadQuotaUsage(int64_t since) = 0;

  // High-water marks: stores max(stored, value) under `name` in one step and returns it, so a
  // caller learns at once whether it is behind (a replayed alias file). Never moves backwards.
  [[nodiscard]] virtual absl::StatusOr<int64_t> RaiseHighWater(const std::string& name,
                                                               int64_t value) = 0;

  // Jobs. PutJob adds a queued job; ResourceExhausted when its owner would pass `quota`
  // (checked in the same transaction).
  [[nodiscard]] virtual absl::Status PutJob(const JobRecord& job, const JobQuota& quota) = 0;
  // NotFound for an unknown id.
  [[nodiscard]] virtual absl::StatusOr<JobRecord> GetJob(const std::string& id) = 0;
  // The job `id` if one of `owners` submitted it; NotFound otherwise, by the same query whether
  // it does not exist or is another's (the same answer in the same time: review helper-133
  // timed another's 8 MB job at 3.7 ms against 0.7 for no job, its row read before the owner
  // was compared).
  [[nodiscard]] virtual absl::StatusOr<JobRecord> GetOwnedJob(
      const std::string& id, const std::vector<std::string>& owners) = 0;
  // The size of that job's stored result (0 while it has none) without reading it; NotFound as
  // GetOwnedJob.
  [[nodiscard]] virtual absl::StatusOr<int64_t> OwnedJobResultBytes(
      const std::string& id, const std::vector<std::string>& owners) = 0;
  // Claims up to `limit` jobs: queued ones due by `now_us`, and running ones whose lease ran out;
  // oldest first, shared among owners (the oldest job of an owner with the fewest running goes
  // first). Each becomes running until `lease_until_us`, its attempts counted up.
  [[nodiscard]] virtual absl::StatusOr<std::vector<JobRecord>> ClaimJobs(int64_t now_us,
                                                                         int64_t lease_until_us,
                                                                         int limit) = 0;
  // Moves the lease of each (id, attempts) claim still held; 0 gives the claims up.
  [[nodiscard]] virtual absl::Status RenewJobs(
      const std::vector<std::pair<std::string, int64_t>>& claims, int64_t lease_until_us) = 0;
  // Ends the claim `job.attempts` of `job.id`: finished (state, status, content type, headers,
  // result, updated and expiry times; the request is dropped then) or queued again (state,
  // not_before_us, refund_attempt). False when the claim is no longer held (its lease ran out
  // and another run took the job).
  // A finished result that would take its owner's jobs past `max_owner_bytes` (0: unchecked) is
  // stored as a 507 saying so instead.
  [[nodiscard]] virtual absl::StatusOr<bool> EndJobRun(const JobRecord& job,
                                                       int64_t max_owner_bytes) = 0;
  // Deletes finished jobs that expired by `now_us`; returns how many.
  [[nodiscard]] virtual absl::StatusOr<int64_t> DeleteExpiredJobs(int64_t now_us) = 0;
  [[nodiscard]] virtual absl::StatusOr<std::vector<JobCount>> CountJobs() = 0;
};

// Opens (creating when absent) the SQLite state file with mode 0600.
[[nodiscard]] absl::StatusOr<std::unique_ptr<StateStore>> OpenSqliteStateStore(
    const std::string& path);

}  // namespace pillar::state
