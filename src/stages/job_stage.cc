#include "stages/job_stage.h"

#include <algorithm>

#include "common/crypto.h"
#include "common/json_writer.h"
#include "common/strings.h"
#include "identity/principal_codec.h"
#include "pipeline/chain.h"
#include "runtime/signature.h"
#include "stages/exchange_event.h"
#include "stages/execute_stage.h"

namespace pillar::stages {

using pipeline::StageResult;
using state::JobRecord;
using state::JobState;

namespace {

constexpr char kJobStateHeader[] = "X-Pillar-Job-State";

// Job ids are 128 random bits in lowercase hex; anything else names no job.
bool IsJobId(std::string_view id) {
  return id.size() == 32 && std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// Whether a run of the request cut short may run again: only if neither its model nor any model
// of its fallback chain says it is not idempotent (a fallback may be what ran).
bool Idempotent(const pipeline::Exchange& ex) {
  auto unsafe = [](const runtime::ModelVersion& v) {
    return v.config && v.config->networked() && !v.config->remote.idempotent;
  };
  if (unsafe(*ex.model)) return false;
  if (!ex.model->config) return true;
  for (const std::string& name : ex.model->config->fallback) {
    for (const auto& version : ex.models->VersionsOf(name)) {
      if (unsafe(*version)) return false;
    }
  }
  return true;
}

std::string JobPath(std::string_view id) { return StrCat("/v2/jobs/", id); }

}  // namespace

StageResult JobStage::OnRequest(pipeline::Exchange& ex) {
  if (ex.operation == pipeline::Operation::kJob) return Read(ex);
  if (ex.operation == pipeline::Operation::kInfer && ex.respond_async && !ex.job_run &&
      queue_ != nullptr) {
    return Submit(ex);
  }
  return StageResult::kContinue;
}

StageResult JobStage::Submit(pipeline::Exchange& ex) {
  // The priority it asks for and the model's signature, as the run will check them: a request
  // that cannot run is refused now, not after the caller came back for it.
  if (absl::StatusOr<runtime::Priority> priority = ExecuteStage::PriorityOf(ex); !priority.ok()) {
    ex.Fail(priority.status());
    return StageResult::kStop;
  }
  if (ex.model->config && ex.infer_request) {
    if (absl::StatusOr<int64_t> rows = runtime::CheckRequest(*ex.model->config, *ex.infer_request);
        !rows.ok()) {
      ex.Fail(rows.status());
      return StageResult::kStop;
    }
  }
  JobRecord job;
  job.id = HexEncode(RandomBytes(16));
  job.owner = ex.principal->id;
  if (ex.principal->method == identity::AuthMethod::kMtls) {
    // The run checks the certificate again, on the listener that verified it (a revoked or
    // expired certificate runs no more jobs than it makes requests).
    if (ex.peer_certificate.empty()) {
      ex.Fail(absl::InvalidArgumentError(
          "the client certificate's chain cannot be kept with the job: it does not verify now, "
          "or is longer than 32 KiB"));
      return StageResult::kStop;
    }
    identity::Principal submitter = *ex.principal;
    submitter.certificate = ex.peer_certificate;
    submitter.listener = std::string(ex.listener);
    job.principal = identity::EncodePrincipal(submitter);
  } else {
    job.principal = identity::EncodePrincipal(*ex.principal);
  }
  job.model = ex.model->name;
  job.version = ex.model->version_text;
  job.request = ex.body;
  job.priority = ex.priority;
  job.idempotent = Idempotent(ex);
  ex.job_id = job.id;
  // Nothing below may touch `ex` after Submit(): the callback may already have resumed it.
  queue_->Submit(std::move(job), [&ex](absl::Status stored) {
    ex.post([&ex, stored = std::move(stored)] {
      if (!stored.ok()) {
        ex.Fail(stored);
        ex.chain().Resume(ex, StageResult::kStop);
        return;
      }
      JsonWriter w(160);
      w.BeginObject();
      w.Key("id");
      w.String(ex.job_id);
      w.Key("state");
      w.String("queued");
      w.Key("model");
      w.String(ex.model->name);
      w.Key("version");
      w.String(ex.model->version_text);
      w.Key("href");
      w.String(JobPath(ex.job_id));
      w.EndObject();
      ex.response = {202, "application/json", std::move(w).Take(), {}};
      ex.response.headers.emplace_back("Location", JobPath(ex.job_id));
      ex.response.headers.emplace_back("Preference-Applied", "respond-async");
      ex.response.headers.emplace_back(kJobStateHeader, "queued");
      ex.chain().Resume(ex, StageResult::kStop);  // answered: the run comes later
    });
  });
  return StageResult::kSuspend;
}

StageResult JobStage::Read(pipeline::Exchange& ex) {
  const absl::Status missing = absl::NotFoundError(StrCat("no job '", ex.job_id, "'"));
  if (queue_ == nullptr || !IsJobId(ex.job_id)) {
    ex.Fail(missing);
    return StageResult::kStop;
  }
  ex.resource = StrCat("job:", ex.job_id);
  // Its own jobs, and those of the keys it was rotated from (a rotation must not strand them).
  std::vector<std::string> owners = {ex.principal->id};
  owners.insert(owners.end(), ex.principal->succeeds.begin(), ex.principal->succeeds.end());
  queue_->Lookup(
      ex.job_id, std::move(owners),
      [this, &ex, missing](absl::StatusOr<jobs::JobQueue::Found> job) {
        ex.post([this, &ex, missing, job = std::move(job)]() mutable {
          if (!job.ok()) {
            if (job.status().code() == absl::StatusCode::kNotFound) {
              // Someone else's job or none: the same answer. The audit says which principal asked
              // for an id that is not theirs (the owner check happens in the queue, so a missing
              // job and another's are audited alike).
              audit_.Record(ExchangeEvent(
                  ex, audit::EventKind::kAuthorization, false,
                  [] { return std::string("no such job for this principal"); }, clock_));
              ex.Fail(missing);
            } else if (absl::IsResourceExhausted(job.status()) ||
                       absl::IsUnavailable(job.status())) {
              // Too many fetches of this principal's, or too many result bytes being sent: soon
              // not.
              ex.Fail(runtime::WithRetryAfter(job.status(), 1));
            } else {
              ex.Fail(job.status());
            }
            ex.chain().Resume(ex, StageResult::kStop);
            return;
          }
          audit_.Record(ExchangeEvent(
              ex, audit::EventKind::kAuthorization, true,
              [] { return std::string("the principal that submitted the job"); }, clock_));
          Answer(ex, std::move(job->job));
          ex.response.held = std::move(job->held);
          ex.chain().Resume(ex, StageResult::kStop);
        });
      });
  return StageResult::kSuspend;
}

void JobStage::Answer(pipeline::Exchange& ex, JobRecord job) const {
  const std::string_view state = state::JobStateName(job.state);
  if (job.state == JobState::kDone || job.state == JobState::kFailed) {
    if (job.status < 200 || job.status > 599) {  // not a status pillar stores: the file was edited
      ex.Fail(absl::DataLossError(StrCat("job ", job.id, " holds no valid result")));
      ex.response.headers.emplace_back(kJobStateHeader, std::string(state));
      return;
    }
    ex.response = {job.status, std::move(job.content_type), std::move(job.result), {}, {}};
    for (std::string_view line : Split(job.headers, '\n')) {
      const size_t colon = line.find(": ");
      if (colon == std::string_view::npos) continue;
      ex.response.headers.emplace_back(std::string(line.substr(0, colon)),
                                       std::string(line.substr(colon + 2)));
    }
    ex.response.headers.emplace_back(kJobStateHeader, std::string(state));
    return;
  }
  JsonWriter w(192);
  w.BeginObject();
  w.Key("id");
  w.String(job.id);
  w.Key("state");
  w.String(state);
  w.Key("model");
  w.String(job.model);
  w.Key("version");
  w.String(job.version);
  w.Key("created");
  w.String(FormatUtc(job.created_us / 1'000'000));
  w.Key("attempts");
  w.Int(job.attempts);
  int64_t retry_s = 1;
  if (job.state == JobState::kQueued) {
    w.Key("position");
    w.Int(job.queued_ahead + 1);
    const int64_t wait_ms = queue_->EstimatedWaitMs(job.queued_ahead);
    if (wait_ms >= 0) {
      w.Key("estimated_wait_ms");
      w.Int(wait_ms);
      retry_s = std::clamp<int64_t>((wait_ms + 999) / 1000, 1, 60);
    }
  }
  w.EndObject();
  ex.response = {202, "application/json", std::move(w).Take(), {}};
  ex.response.headers.emplace_back("Retry-After", StrCat(retry_s));
  ex.response.headers.emplace_back(kJobStateHeader, std::string(state));
}

}  // namespace pillar::stages
