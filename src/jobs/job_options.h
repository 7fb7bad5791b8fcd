// The [jobs] section of pillar.toml: how asynchronous jobs (Prefer: respond-async) are run and
// kept. Each key is described in docs/configuration.md.
//
//   PILLAR_ASSIGN_OR_RETURN(jobs::JobOptions options, jobs::ReadJobsSection(root, "pillar.toml"));
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "state/state_store.h"

namespace pillar::jobs {

struct JobOptions {
  int workers = 4;                                 // jobs this instance runs at once
  absl::Duration keep = absl::Hours(24);           // a finished job is kept this long
  absl::Duration run_timeout = absl::Seconds(60);  // each run's deadline
  absl::Duration max_wait = absl::Hours(1);        // a job not begun by then fails
  absl::Duration lease = absl::Seconds(10);        // a running job's claim, renewed at a third
  absl::Duration poll = absl::Milliseconds(250);   // how often the store is asked for work
  int64_t max_unfinished_per_principal = 100;      // queued or running, per submitter
  int64_t max_jobs_per_principal = 10'000;         // kept, finished ones included
  int64_t max_bytes_per_principal = int64_t{256} << 20;  // requests and results kept
  // Fetches of one principal's jobs at once (lookup to last byte sent), and the bytes of results
  // being sent, all principals together (jobs/fetch_budget.h).
  int64_t max_fetches_per_principal = 4;
  int64_t max_result_bytes_in_flight = int64_t{256} << 20;
  // Runs refused as load (429, 503) are tried again, with backoff, up to this many runs in all.
  int max_attempts = 5;
  // The keys that seal job payloads at rest (jobs/payload_sealer.h): the first seals, all open.
  // Empty: jobs.key beside the state file, made on first start.
  std::vector<std::string> payload_keys;
};

inline state::JobQuota QuotaOf(const JobOptions& o) {
  return {.max_unfinished = o.max_unfinished_per_principal,
          .max_jobs = o.max_jobs_per_principal,
          .max_bytes = o.max_bytes_per_principal};
}

// Relative paths are taken from `base`.
[[nodiscard]] absl::StatusOr<JobOptions> ReadJobsSection(const toml::table& root,
                                                         std::string_view source,
                                                         const std::string& base);

}  // namespace pillar::jobs
