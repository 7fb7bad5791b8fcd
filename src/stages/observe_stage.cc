#include "stages/observe_stage.h"

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/strings.h"
#include "guard/screen.h"

namespace pillar::stages {

using monitor::AccessLog;
using monitor::AccessRecord;
using monitor::LatencyBuckets;
using monitor::MetricsRegistry;

ObserveStage::ObserveStage(MetricsRegistry& metrics, AccessLog& access_log, Clock& clock)
    : requests_(metrics.AddCounter("pillar_requests_total",
                                   "Requests by operation, model, version and outcome.",
                                   {"operation", "model", "version", "outcome"})),
      duration_(metrics.AddHistogram("pillar_request_duration_seconds",
                                     "Time from a parsed request to its response, by operation.",
                                     {"operation"}, LatencyBuckets())),
      queue_(metrics.AddHistogram("pillar_queue_duration_seconds",
                                  "Time an inference request waited for a batch and an instance.",
                                  {"model", "version"}, LatencyBuckets())),
      compute_(
          metrics.AddHistogram("pillar_compute_duration_seconds",
                               "Model execution time of the batch an inference request ran in.",
                               {"model", "version"}, LatencyBuckets())),
      shed_(metrics.AddCounter("pillar_shed_total",
                               "Inference requests a model's queue refused at once as load: its "
                               "class's share of the queue was full, or the estimated wait "
                               "exceeded the request's deadline.",
                               {"model", "version"})),
      overhead_(metrics
                    .AddHistogram("pillar_request_overhead_seconds",
                                  "Time an inference request spent in pillar outside model compute "
                                  "and queueing: parsing, stages, encoding.",
                                  {}, LatencyBuckets())
                    .Get()),
      tokens_(metrics.AddCounter(
          "pillar_llm_tokens_total",
          "Tokens of language models' answered calls (the model's usage; the prompt as pillar "
          "estimated it when the model reported none), by model, tenant, principal and kind "
          "(prompt, completion).",
          {"model", "tenant", "principal", "kind"})),
      first_token_(metrics.AddHistogram(
          "pillar_llm_time_to_first_token_seconds",
          "Time from a streamed call's arrival to its first event reaching the client.", {"model"},
          LatencyBuckets())),
      token_rate_(metrics.AddHistogram(
          "pillar_llm_tokens_per_second",
          "Completion tokens per second of a streamed answer, after its first token.", {"model"},
          {1, 5, 10, 20, 50, 100, 200, 500, 1000, 5000, 10000})),
      in_flight_(
          metrics.AddGauge("pillar_inflight_requests", "Requests inside the chain now.").Get()),
      access_log_(access_log),
      clock_(clock) {}

// The series of one version's requests, queue and compute times and shed requests, made as they
// are first asked for and held (monitor::Family::Hold) by the version, so that they leave
// /metrics when the version goes (review of the metrics: a store that takes a version a day kept
// the series of every version it ever served). A version's requests run on every loop: a series
// once made is found under a shared lock.
class ObserveStage::VersionSeries final : public runtime::ModelVersion::Kept {
 public:
  VersionSeries(ObserveStage& stage, const runtime::ModelVersion& version)
      : stage_(stage), model_(version.name), version_(version.version_text) {}

  monitor::Counter& Requests(std::string_view operation, std::string_view outcome) {
    {
      absl::ReaderMutexLock lock(&mu_);
      for (const Request& r : requests_) {
        if (r.operation == operation && r.outcome == outcome) return *r.counter;
      }
    }
    absl::MutexLock lock(&mu_);
    for (const Request& r : requests_) {
      if (r.operation == operation && r.outcome == outcome) return *r.counter;
    }
    requests_.push_back({std::string(operation), std::string(outcome),
                         stage_.requests_.Hold({operation, model_, version_, outcome})});
    return *requests_.back().counter;
  }
  monitor::Counter& Shed() { return Made(&VersionSeries::shed_, stage_.shed_); }
  monitor::Histogram& Queue() { return Made(&VersionSeries::queue_, stage_.queue_); }
  monitor::Histogram& Compute() { return Made(&VersionSeries::compute_, stage_.compute_); }

 private:
  struct Request {
    std::string operation, outcome;
    std::shared_ptr<monitor::Counter> counter;
  };

  // The series `held` names (one of the members below, read and written under mu_).
  template <typename Metric>
  Metric& Made(std::shared_ptr<Metric> VersionSeries::*held, monitor::Family<Metric>& family) {
    {
      absl::ReaderMutexLock lock(&mu_);
      if (this->*held != nullptr) return *(this->*held);
    }
    absl::MutexLock lock(&mu_);
    if (this->*held == nullptr) this->*held = family.Hold({model_, version_});
    return *(this->*held);
  }

  ObserveStage& stage_;
  const std::string model_, version_;
  absl::Mutex mu_;
  std::vector<Request> requests_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<monitor::Counter> shed_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<monitor::Histogram> queue_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<monitor::Histogram> compute_ ABSL_GUARDED_BY(mu_);
};

ObserveStage::VersionSeries* ObserveStage::SeriesOf(const runtime::ModelVersion& version) {
  return static_cast<VersionSeries*>(version.KeptBy(this, [&] {
    return std::unique_ptr<runtime::ModelVersion::Kept>(
        std::make_unique<VersionSeries>(*this, version));
  }));
}

std::string_view ObserveStage::Outcome(int status) {
  if (status < 400) return "success";
  switch (status) {
    case 401:
      return "unauthenticated";
    case 403:
      return "forbidden";
    case 404:
      return "not_found";
    case 429:
      return "limited";
    case 503:
      return "overloaded";
    default:
      return status < 500 ? "invalid" : "error";
  }
}

std::string_view ObserveStage::OperationName(pipeline::Operation op) {
  switch (op) {
    case pipeline::Operation::kServerMetadata:
      return "server_metadata";
    case pipeline::Operation::kModelMetadata:
      return "model_metadata";
    case pipeline::Operation::kModelReady:
      return "model_ready";
    case pipeline::Operation::kInfer:
      return "infer";
    case pipeline::Operation::kMetrics:
      return "metrics";
    case pipeline::Operation::kAdminModels:
      return "admin_models";
    case pipeline::Operation::kAdminBackends:
      return "admin_backends";
    case pipeline::Operation::kJob:
      return "job";
    case pipeline::Operation::kListModels:
      return "openai_models";
    case pipeline::Operation::kChatCompletions:
      return "chat_completions";
    case pipeline::Operation::kCompletions:
      return "completions";
    case pipeline::Operation::kEmbeddings:
      return "embeddings";
  }
  return "unknown";
}

pipeline::StageResult ObserveStage::OnRequest(pipeline::Exchange&) {
  in_flight_.Add(1);
  return pipeline::StageResult::kContinue;
}

namespace {

// What the access log keeps of a request's path, and of the model, version and job it named.
constexpr size_t kMaxLoggedPath = 2048;
constexpr size_t kMaxLoggedName = 256;
// An error quotes a name or two, or what an upstream said.
constexpr size_t kMaxLoggedError = 2048;

// A failed request's path, model and version are as the client sent them and may hold anything:
// what the guard's recognizers find in them is not kept (`storage` holds the redacted texts).
// A request that succeeded named a model and version that exist, but its query (which no route
// reads) is the client's too: a key passed as `?api_key=` (review helper-125) is not kept either.
// The model, version and job came from the path, decoded once by the router: they are read as the
// path is, escapes decoded while any are left (review helper-136: "jo%2540example.org" as a job
// id was logged as "jo%40example.org").
void RedactClientText(AccessRecord& record, std::array<std::string, 4>& storage) {
  storage = {guard::RedactPath(record.path), guard::RedactPath(record.model),
             guard::RedactPath(record.version), guard::RedactPath(record.job)};
  record.path = storage[0];
  record.model = storage[1];
  record.version = storage[2];
  record.job = storage[3];
}

}  // namespace

void ObserveStage::OnResponse(pipeline::Exchange& ex) {
  in_flight_.Add(-1);
  const int64_t total_ns = clock_.MonotonicNanos() - ex.start_ns;
  const std::string_view operation = OperationName(ex.operation);
  // A stream that failed after it began keeps its 200: its outcome says it was cut.
  const std::string_view outcome =
      ex.streaming && !ex.error.empty() ? std::string_view("cut") : Outcome(ex.response.status);
  // Metric labels name only models the server has: a name taken from the path of a request
  // for an unknown model would let any client mint new time series without end. The access
  // log still records what was asked.
  const std::string_view model = ex.model ? std::string_view(ex.model->name) : std::string_view();
  const std::string_view version =
      ex.model ? std::string_view(ex.model->version_text) : std::string_view();
  VersionSeries* series = ex.model ? SeriesOf(*ex.model) : nullptr;
  if (series != nullptr) {
    series->Requests(operation, outcome).Increment();
    if (ex.shed) series->Shed().Increment();
  } else {
    requests_.Get({operation, model, version, outcome}).Increment();
    if (ex.shed && ex.model) shed_.Get({model, version}).Increment();
  }
  duration_.Get({operation}).Observe(double(total_ns) * 1e-9);
  const bool ran = ex.operation == pipeline::Operation::kInfer && ex.infer_result.batch_size > 0;
  if (ran) {
    const double queued = double(ex.infer_result.queue_ns) * 1e-9;
    const double computed = double(ex.infer_result.compute_ns) * 1e-9;
    if (series != nullptr) {
      series->Queue().Observe(queued);
      series->Compute().Observe(computed);
    } else {
      queue_.Get({model, version}).Observe(queued);
      compute_.Get({model, version}).Observe(computed);
    }
    overhead_.Observe(double(total_ns + ex.caller_check_ns - ex.infer_result.queue_ns -
                             ex.infer_result.compute_ns) *
                      1e-9);
  }
  // What a call was charged in tokens (admit_stage.cc) is counted wherever it was charged: an
  // answer the guard withheld and a call cut by its deadline are charged too (found by review
  // helper-67: their tokens reached neither the metric nor `pillar usage`).
  const bool generated = pipeline::GeneratesText(ex.operation) && ex.model != nullptr;
  const bool answered = generated && (ex.streaming || ex.response.status < 400);
  const protocol::TokenUsage& usage = ex.infer_result.usage;
  const bool charged = generated && (answered || usage.prompt_tokens + usage.completion_tokens > 0);
  if (charged) ObserveTokens(ex, total_ns, answered);
  if (access_log_.enabled()) {
    Log(ex, {total_ns, operation, outcome, version, ran, charged, answered});
  }
}

void ObserveStage::Log(const pipeline::Exchange& ex, const Logged& what) {
  const auto [total_ns, operation, outcome, version, ran, charged, answered] = what;
  const protocol::TokenUsage& usage = ex.infer_result.usage;
  AccessRecord record;
  record.request_id = ex.request_id;
  record.listener = ex.listener;
  record.remote = ex.remote;
  record.method = ex.method;
  record.path = ex.target;
  record.operation = operation;
  record.status = ex.response.status;
  record.outcome = outcome;
  record.model = ex.model_name;
  record.version = ex.model ? version : std::string_view(ex.model_version);
  std::string fallback;
  if (ex.answered_by != nullptr) {
    fallback = StrCat(ex.answered_by->name, "/", ex.answered_by->version_text);
    record.fallback = fallback;
  }
  if (ex.principal) {
    record.principal = ex.principal->id;
    record.tenant = ex.principal->tenant;
  }
  if (charged) {
    record.prompt_tokens = usage.prompt_tokens;
    record.completion_tokens = usage.completion_tokens;
    if (answered && ex.first_event_ns > 0) record.first_token_ns = ex.first_event_ns - ex.start_ns;
  }
  record.job = ex.job_id;
  record.duration_ns = total_ns;
  if (ran) {
    record.queue_ns = ex.infer_result.queue_ns;
    record.compute_ns = ex.infer_result.compute_ns;
    record.batch_size = ex.infer_result.batch_size;
  }
  record.request_bytes = int64_t(ex.body.size());
  record.response_bytes = ex.streaming ? ex.streamed_bytes : int64_t(ex.response.body.size());
  // An error may quote what the client sent (a tensor's name, a field, a model or job named in
  // the path, escaped again): what a recognizer finds in it is not kept, and it is cut after that
  // (review helper-136: a 15,000-byte model name was logged whole in the error beside the cut
  // path and model).
  std::string error;
  if (!ex.error.empty()) {
    error = guard::RedactPath(ex.error);
    record.error = CutForLog(error, kMaxLoggedError);
  }
  std::array<std::string, 4> redacted;
  if (ex.response.status >= 400 || record.path.find_first_of("?#") != std::string_view::npos) {
    RedactClientText(record, redacted);
  }
  // What the client wrote in its path is cut to a length no real one has (a 15 KB path wrote
  // 30 KB to the log, once as the path and once as the model it named: review helper-133), after
  // it was redacted, and never inside a run that could be a secret (review helper-134).
  record.path = CutForLog(record.path, kMaxLoggedPath);
  record.model = CutForLog(record.model, kMaxLoggedName);
  record.version = CutForLog(record.version, kMaxLoggedName);
  record.job = CutForLog(record.job, kMaxLoggedName);
  access_log_.Write(record);
}

void ObserveStage::ObserveTokens(const pipeline::Exchange& ex, int64_t total_ns, bool answered) {
  const protocol::TokenUsage& usage = ex.infer_result.usage;
  const std::string_view tenant = ex.principal ? std::string_view(ex.principal->tenant) : "";
  const std::string_view principal = ex.principal ? std::string_view(ex.principal->id) : "";
  // The model that did the work: a fallback's tokens are its own (found by review helper-67:
  // they were counted as the model asked for's).
  const std::string_view model = ex.answered_by ? ex.answered_by->name : ex.model->name;
  tokens_.Get({model, tenant, principal, "prompt"}).Increment(uint64_t(usage.prompt_tokens));
  tokens_.Get({model, tenant, principal, "completion"})
      .Increment(uint64_t(usage.completion_tokens));
  if (!answered || ex.first_event_ns <= 0) return;
  first_token_.Get({model}).Observe(double(ex.first_event_ns - ex.start_ns) * 1e-9);
  const double after_first = double(total_ns - (ex.first_event_ns - ex.start_ns)) * 1e-9;
  if (usage.completion_tokens > 1 && after_first > 0) {
    token_rate_.Get({model}).Observe(double(usage.completion_tokens - 1) / after_first);
  }
}

}  // namespace pillar::stages
