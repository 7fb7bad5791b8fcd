#include "state/sqlite_job_table.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>

#include "common/status_macros.h"
#include "common/strings.h"
#include "state/sqlite_util.h"

namespace pillar::state {
namespace {

constexpr char kColumns[] =
    "id, owner, principal, model, version, request, priority, idempotent, state, created_us, "
    "updated_us, not_before_us, lease_until_us, attempts, expires_us, status, content_type, "
    "headers, result";

std::optional<JobState> ParseJobState(std::string_view text) {
  for (JobState s : {JobState::kQueued, JobState::kRunning, JobState::kDone, JobState::kFailed}) {
    if (JobStateName(s) == text) return s;
  }
  return std::nullopt;
}

// One row, in kColumns order. A state that names none (a file edited by hand) reads as failed,
// so the job is neither run nor lost.
JobRecord ReadJob(sqlite3_stmt* st) {
  JobRecord job;
  job.id = ColumnText(st, 0);
  job.owner = ColumnText(st, 1);
  job.principal = ColumnText(st, 2);
  job.model = ColumnText(st, 3);
  job.version = ColumnText(st, 4);
  job.request = ColumnBlob(st, 5);
  job.priority = ColumnText(st, 6);
  job.idempotent = sqlite3_column_int64(st, 7) != 0;
  job.state = ParseJobState(ColumnText(st, 8)).value_or(JobState::kFailed);
  job.created_us = sqlite3_column_int64(st, 9);
  job.updated_us = sqlite3_column_int64(st, 10);
  job.not_before_us = sqlite3_column_int64(st, 11);
  job.lease_until_us = sqlite3_column_int64(st, 12);
  job.attempts = sqlite3_column_int64(st, 13);
  job.expires_us = sqlite3_column_int64(st, 14);
  job.status = int(sqlite3_column_int64(st, 15));
  job.content_type = ColumnText(st, 16);
  job.headers = ColumnText(st, 17);
  job.result = ColumnBlob(st, 18);
  return job;
}

// Up to `limit` of `candidates` (oldest first), fairly: each pick is the oldest job of an owner
// with the fewest jobs running, so one owner's backlog cannot hold every worker while another's
// job waits; with one owner waiting, it gets them all.
std::vector<JobRecord> ShareAmongOwners(std::vector<JobRecord> candidates,
                                        std::map<std::string, int64_t> running, int limit) {
  std::vector<JobRecord> chosen;
  std::vector<bool> taken(candidates.size(), false);
  while (int(chosen.size()) < limit) {
    int best = -1;
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (taken[i]) continue;
      if (best < 0 || running[candidates[i].owner] < running[candidates[size_t(best)].owner]) {
        best = int(i);
      }
    }
    if (best < 0) break;
    taken[size_t(best)] = true;
    ++running[candidates[size_t(best)].owner];
    chosen.push_back(std::move(candidates[size_t(best)]));
  }
  return chosen;
}

}  // namespace

absl::StatusOr<std::map<std::string, int64_t>> SqliteJobTable::RunningByOwner(int64_t now_us) {
  if (!running_.has_value()) {
    running_.emplace(db_,
                     "SELECT owner, COUNT(*) FROM jobs WHERE state = 'running' AND "
                     "lease_until_us >= ? GROUP BY owner");
  }
  Statement& select = *running_;
  if (!select.ok()) {
    running_.reset();
    return SqliteError(db_, "prepare running jobs");
  }
  select.Reset();
  select.Bind(1, now_us);
  std::map<std::string, int64_t> running;
  int rc;
  while ((rc = sqlite3_step(select.get())) == SQLITE_ROW) {
    running[ColumnText(select.get(), 0)] = sqlite3_column_int64(select.get(), 1);
  }
  absl::Status error = rc == SQLITE_DONE ? absl::OkStatus() : SqliteError(db_, "running jobs");
  select.Reset();  // kept: not left mid-read
  if (!error.ok()) return error;
  return running;
}

absl::Status SqliteJobTable::Rollback(absl::Status status) {
  (void)SqliteExec(db_, "ROLLBACK");
  return status;
}

absl::Status SqliteJobTable::Put(const JobRecord& job, const JobQuota& quota) {
  PILLAR_RETURN_IF_ERROR(SqliteExec(db_, "BEGIN IMMEDIATE"));
  Statement count(
      db_,
      "SELECT COUNT(*), COALESCE(SUM(state IN ('queued', 'running')), 0), "
      "COALESCE(SUM(length(request) + length(result) + length(principal)), 0) FROM jobs "
      "WHERE owner = ?");
  if (!count.ok()) return Rollback(SqliteError(db_, "prepare job count"));
  count.Bind(1, job.owner);
  if (sqlite3_step(count.get()) != SQLITE_ROW) return Rollback(SqliteError(db_, "job count"));
  const int64_t jobs = sqlite3_column_int64(count.get(), 0);
  const int64_t unfinished = sqlite3_column_int64(count.get(), 1);
  const int64_t bytes = sqlite3_column_int64(count.get(), 2);
  std::string refused;
  if (unfinished >= quota.max_unfinished) {
    refused = StrCat("has ", unfinished, " unfinished jobs, the most allowed; wait for some first");
  } else if (jobs >= quota.max_jobs) {
    refused = StrCat("has ", jobs, " jobs kept, the most allowed, until finished ones expire");
  } else if (bytes + int64_t(job.request.size() + job.principal.size()) > quota.max_bytes) {
    refused = StrCat("keeps ", bytes, " bytes of jobs; this one would pass the most allowed, ",
                     quota.max_bytes);
  }
  if (!refused.empty()) {
    return Rollback(absl::ResourceExhaustedError(StrCat(job.owner, " ", refused)));
  }
  Statement insert(db_, StrCat("INSERT INTO jobs (", kColumns,
                               ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
                            .c_str());
  if (!insert.ok()) return Rollback(SqliteError(db_, "prepare job insert"));
  insert.Bind(1, job.id);
  insert.Bind(2, job.owner);
  insert.Bind(3, job.principal);
  insert.Bind(4, job.model);
  insert.Bind(5, job.version);
  insert.BindBlob(6, job.request);
  insert.Bind(7, job.priority);
  insert.Bind(8, int64_t{job.idempotent});
  insert.Bind(9, JobStateName(job.state));
  insert.Bind(10, job.created_us);
  insert.Bind(11, job.updated_us);
  insert.Bind(12, job.not_before_us);
  insert.Bind(13, job.lease_until_us);
  insert.Bind(14, job.attempts);
  insert.Bind(15, job.expires_us);
  insert.Bind(16, int64_t{job.status});
  insert.Bind(17, job.content_type);
  insert.Bind(18, job.headers);
  insert.BindBlob(19, job.result);
  const int rc = sqlite3_step(insert.get());
  if (rc == SQLITE_CONSTRAINT) {
    return Rollback(absl::AlreadyExistsError(StrCat("job ", job.id, " exists")));
  }
  if (rc != SQLITE_DONE) return Rollback(SqliteError(db_, "insert job"));
  return SqliteExec(db_, "COMMIT");
}

namespace {

// " AND owner IN (?, ...)" for `count` owners, bound from parameter 2 on.
std::string OwnerIn(size_t count) {
  std::string sql = " AND owner IN (";
  for (size_t i = 0; i < count; ++i) sql += i == 0 ? "?" : ", ?";
  return sql + ")";
}

}  // namespace

absl::StatusOr<int64_t> SqliteJobTable::ResultBytes(const std::string& id,
                                                    const std::vector<std::string>& owners) {
  // length() of a blob reads its size from the row's header, not its pages.
  Statement select(
      db_, StrCat("SELECT length(result) FROM jobs WHERE id = ?", OwnerIn(owners.size())).c_str());
  if (!select.ok()) return SqliteError(db_, "prepare job size");
  select.Bind(1, id);
  for (size_t i = 0; i < owners.size(); ++i) select.Bind(int(i) + 2, owners[i]);
  const int rc = sqlite3_step(select.get());
  if (rc == SQLITE_DONE) return absl::NotFoundError(StrCat("no job ", id));
  if (rc != SQLITE_ROW) return SqliteError(db_, "job size");
  return sqlite3_column_int64(select.get(), 0);
}

absl::StatusOr<JobRecord> SqliteJobTable::Get(const std::string& id,
                                              const std::vector<std::string>* owners) {
  std::string sql = StrCat("SELECT ", kColumns, " FROM jobs WHERE id = ?");
  if (owners != nullptr) sql += OwnerIn(owners->size());
  Statement select(db_, sql.c_str());
  if (!select.ok()) return SqliteError(db_, "prepare job select");
  select.Bind(1, id);
  if (owners != nullptr) {
    for (size_t i = 0; i < owners->size(); ++i) select.Bind(int(i) + 2, (*owners)[i]);
  }
  const int rc = sqlite3_step(select.get());
  if (rc == SQLITE_DONE) return absl::NotFoundError(StrCat("no job ", id));
  if (rc != SQLITE_ROW) return SqliteError(db_, "job select");
  JobRecord job = ReadJob(select.get());
  if (job.state == JobState::kQueued) {
    Statement ahead(db_,
                    "SELECT COUNT(*) FROM jobs WHERE state = 'queued' AND "
                    "(created_us < ?1 OR (created_us = ?1 AND id < ?2))");
    if (!ahead.ok()) return SqliteError(db_, "prepare job position");
    ahead.Bind(1, job.created_us);
    ahead.Bind(2, job.id);
    if (sqlite3_step(ahead.get()) != SQLITE_ROW) return SqliteError(db_, "job position");
    job.queued_ahead = sqlite3_column_int64(ahead.get(), 0);
  }
  return job;
}

absl::StatusOr<std::vector<JobRecord>> SqliteJobTable::Claim(int64_t now_us, int64_t lease_until_us,
                                                             int limit) {
  PILLAR_RETURN_IF_ERROR(SqliteExec(db_, "BEGIN IMMEDIATE"));
  // The candidates: each owner's `limit` oldest due jobs, so that a long backlog of one owner
  // cannot fill the candidates and hide another's job from the fair choice below.
  if (!candidates_.has_value()) {
    candidates_.emplace(db_, StrCat("SELECT ", kColumns,
                                    " FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY owner ORDER "
                                    "BY created_us, id) AS n FROM jobs WHERE (state = 'queued' AND "
                                    "not_before_us <= ?1) OR (state = 'running' AND lease_until_us "
                                    "< ?1)) WHERE n <= ?2 ORDER BY created_us, id")
                                 .c_str());
  }
  Statement& select = *candidates_;
  if (!select.ok()) {
    candidates_.reset();
    return Rollback(SqliteError(db_, "prepare job claim"));
  }
  select.Reset();
  select.Bind(1, now_us);
  select.Bind(2, int64_t{limit});
  std::vector<JobRecord> candidates;
  int rc;
  while ((rc = sqlite3_step(select.get())) == SQLITE_ROW) {
    candidates.push_back(ReadJob(select.get()));
  }
  absl::Status error = rc == SQLITE_DONE ? absl::OkStatus() : SqliteError(db_, "job claim");
  select.Reset();  // kept: not left mid-read
  if (!error.ok()) return Rollback(std::move(error));
  absl::StatusOr<std::map<std::string, int64_t>> running = RunningByOwner(now_us);
  if (!running.ok()) return Rollback(running.status());
  std::vector<JobRecord> jobs = ShareAmongOwners(std::move(candidates), *running, limit);
  Statement update(db_,
                   "UPDATE jobs SET state = 'running', lease_until_us = ?, updated_us = ?, "
                   "attempts = attempts + 1 WHERE id = ?");
  if (!update.ok()) return Rollback(SqliteError(db_, "prepare job claim update"));
  for (JobRecord& job : jobs) {
    sqlite3_reset(update.get());
    update.Bind(1, lease_until_us);
    update.Bind(2, now_us);
    update.Bind(3, job.id);
    if (sqlite3_step(update.get()) != SQLITE_DONE) {
      return Rollback(SqliteError(db_, "job claim update"));
    }
    job.interrupted = job.state == JobState::kRunning;
    job.state = JobState::kRunning;
    job.lease_until_us = lease_until_us;
    job.updated_us = now_us;
    job.attempts += 1;
  }
  PILLAR_RETURN_IF_ERROR(SqliteExec(db_, "COMMIT"));
  return jobs;
}

absl::Status SqliteJobTable::Renew(const std::vector<std::pair<std::string, int64_t>>& claims,
                                   int64_t lease_until_us) {
  if (claims.empty()) return absl::OkStatus();
  PILLAR_RETURN_IF_ERROR(SqliteExec(db_, "BEGIN IMMEDIATE"));
  Statement update(db_,
                   "UPDATE jobs SET lease_until_us = ? WHERE id = ? AND attempts = ? AND "
                   "state = 'running'");
  if (!update.ok()) return Rollback(SqliteError(db_, "prepare job renew"));
  for (const auto& [id, attempts] : claims) {
    sqlite3_reset(update.get());
    update.Bind(1, lease_until_us);
    update.Bind(2, id);
    update.Bind(3, attempts);
    if (sqlite3_step(update.get()) != SQLITE_DONE) return Rollback(SqliteError(db_, "job renew"));
  }
  return SqliteExec(db_, "COMMIT");
}

absl::StatusOr<bool> SqliteJobTable::EndRun(const JobRecord& job, int64_t max_owner_bytes) {
  const bool finished = job.state == JobState::kDone || job.state == JobState::kFailed;
  if (!finished || max_owner_bytes <= 0 || job.result.empty()) return Update(job, job.result);
  // A result counts against what its owner may keep, like the requests it submitted: one that
  // would pass it is replaced by an error saying so (checked in the same transaction).
  PILLAR_RETURN_IF_ERROR(SqliteExec(db_, "BEGIN IMMEDIATE"));
  Statement kept(db_,
                 "SELECT COALESCE(SUM(length(result) + length(principal) + CASE WHEN id = ?1 "
                 "THEN 0 ELSE length(request) END), 0) FROM jobs WHERE owner = (SELECT owner "
                 "FROM jobs WHERE id = ?1)");
  if (!kept.ok()) return Rollback(SqliteError(db_, "prepare job bytes"));
  kept.Bind(1, job.id);
  if (sqlite3_step(kept.get()) != SQLITE_ROW) return Rollback(SqliteError(db_, "job bytes"));
  const int64_t bytes = sqlite3_column_int64(kept.get(), 0);
  JobRecord end = job;
  if (bytes + int64_t(job.result.size()) > max_owner_bytes) {
    end.status = 507;
    end.state = JobState::kFailed;
    end.content_type = "application/json";
    end.headers.clear();
    end.result =
        StrCat("{\"error\":\"the job's result (", job.result.size(), " bytes) would pass the ",
               max_owner_bytes,
               " bytes its principal's jobs may keep; fetch or let earlier ones expire\"}");
  }
  absl::StatusOr<bool> ended = Update(end, end.result);
  if (!ended.ok()) return Rollback(ended.status());
  PILLAR_RETURN_IF_ERROR(SqliteExec(db_, "COMMIT"));
  return ended;
}

absl::StatusOr<bool> SqliteJobTable::Update(const JobRecord& job, std::string_view result) {
  Statement update(db_,
                   "UPDATE jobs SET state = ?, status = ?, content_type = ?, headers = ?, "
                   "result = ?, updated_us = ?, expires_us = ?, not_before_us = ?, "
                   "lease_until_us = 0, attempts = attempts - ?, "
                   "request = CASE WHEN ?1 IN ('done', 'failed') THEN X'' ELSE request END "
                   "WHERE id = ? AND attempts = ? AND state = 'running'");
  if (!update.ok()) return SqliteError(db_, "prepare job end");
  update.Bind(1, JobStateName(job.state));
  update.Bind(2, int64_t{job.status});
  update.Bind(3, job.content_type);
  update.Bind(4, job.headers);
  update.BindBlob(5, result);
  update.Bind(6, job.updated_us);
  update.Bind(7, job.expires_us);
  update.Bind(8, job.not_before_us);
  update.Bind(9, int64_t{job.refund_attempt});
  update.Bind(10, job.id);
  update.Bind(11, job.attempts);
  if (sqlite3_step(update.get()) != SQLITE_DONE) return SqliteError(db_, "job end");
  return sqlite3_changes(db_) == 1;
}

absl::StatusOr<int64_t> SqliteJobTable::DeleteExpired(int64_t now_us) {
  Statement remove(db_, "DELETE FROM jobs WHERE state IN ('done', 'failed') AND expires_us <= ?");
  if (!remove.ok()) return SqliteError(db_, "prepare job expiry");
  remove.Bind(1, now_us);
  if (sqlite3_step(remove.get()) != SQLITE_DONE) return SqliteError(db_, "job expiry");
  return int64_t{sqlite3_changes(db_)};
}

absl::StatusOr<std::vector<JobCount>> SqliteJobTable::Count() {
  Statement select(db_, "SELECT model, state, COUNT(*) FROM jobs GROUP BY model, state");
  if (!select.ok()) return SqliteError(db_, "prepare job counts");
  std::vector<JobCount> counts;
  int rc;
  while ((rc = sqlite3_step(select.get())) == SQLITE_ROW) {
    counts.push_back({ColumnText(select.get(), 0),
                      ParseJobState(ColumnText(select.get(), 1)).value_or(JobState::kFailed),
                      sqlite3_column_int64(select.get(), 2)});
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, "job counts");
  return counts;
}

}  // namespace pillar::state
