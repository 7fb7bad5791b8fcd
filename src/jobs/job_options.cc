#include "jobs/job_options.h"

#include "common/status_macros.h"
#include "common/strings.h"
#include "common/toml_parse.h"

namespace pillar::jobs {

[[nodiscard]] absl::StatusOr<JobOptions> ReadJobsSection(const toml::table& root,
                                                         std::string_view source,
                                                         const std::string& base) {
  JobOptions o;
  TomlSection s(root["jobs"].as_table(), "jobs", source);
  PILLAR_RETURN_IF_ERROR(s.ReadInt("workers", o.workers, 1, 1024));
  PILLAR_RETURN_IF_ERROR(s.ReadMillis("keep_ms", o.keep, 1'000, 30LL * 86'400'000));
  PILLAR_RETURN_IF_ERROR(s.ReadMillis("run_timeout_ms", o.run_timeout, 1, 86'400'000));
  PILLAR_RETURN_IF_ERROR(s.ReadMillis("max_wait_ms", o.max_wait, 1'000, 30LL * 86'400'000));
  PILLAR_RETURN_IF_ERROR(s.ReadMillis("lease_ms", o.lease, 300, 3'600'000));
  PILLAR_RETURN_IF_ERROR(s.ReadMillis("poll_ms", o.poll, 10, 60'000));
  PILLAR_RETURN_IF_ERROR(
      s.ReadInt("max_unfinished_per_principal", o.max_unfinished_per_principal, 1, 1'000'000));
  PILLAR_RETURN_IF_ERROR(
      s.ReadInt("max_jobs_per_principal", o.max_jobs_per_principal, 1, 100'000'000));
  PILLAR_RETURN_IF_ERROR(
      s.ReadInt("max_bytes_per_principal", o.max_bytes_per_principal, 1 << 20, int64_t{1} << 40));
  PILLAR_RETURN_IF_ERROR(
      s.ReadInt("max_fetches_per_principal", o.max_fetches_per_principal, 1, 1'024));
  PILLAR_RETURN_IF_ERROR(s.ReadInt("max_result_bytes_in_flight", o.max_result_bytes_in_flight,
                                   1 << 20, int64_t{1} << 40));
  PILLAR_RETURN_IF_ERROR(s.ReadInt("max_attempts", o.max_attempts, 1, 100));
  PILLAR_RETURN_IF_ERROR(s.ReadPaths("payload_keys", o.payload_keys, base));
  if (s.Contains("payload_keys") && o.payload_keys.empty()) {
    return absl::InvalidArgumentError(
        StrCat(source, ": [jobs] payload_keys is empty (leave it out for the default key)"));
  }
  PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
  if (o.poll >= o.lease) {
    return absl::InvalidArgumentError(StrCat(
        source, ": [jobs] poll_ms must be below lease_ms, or claims lapse between renewals"));
  }
  return o;
}

}  // namespace pillar::jobs
