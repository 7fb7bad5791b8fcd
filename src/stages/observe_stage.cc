#include "stages/observe_stage.h"

#include "common/strings.h"

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
      in_flight_(
          metrics.AddGauge("pillar_inflight_requests", "Requests inside the chain now.").Get()),
      access_log_(access_log),
      clock_(clock) {}

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

void ObserveStage::OnResponse(pipeline::Exchange& ex) {
  in_flight_.Add(-1);
  const int64_t total_ns = clock_.MonotonicNanos() - ex.start_ns;
  const std::string_view operation = OperationName(ex.operation);
  const std::string_view outcome = Outcome(ex.response.status);
  // Metric labels name only models the server has: a name taken from the path of a request
  // for an unknown model would let any client mint new time series without end. The access
  // log still records what was asked.
  const std::string_view model = ex.model ? std::string_view(ex.model->name) : std::string_view();
  const std::string_view version =
      ex.model ? std::string_view(ex.model->version_text) : std::string_view();
  requests_.Get({operation, model, version, outcome}).Increment();
  if (ex.shed && ex.model) shed_.Get({model, version}).Increment();
  duration_.Get({operation}).Observe(double(total_ns) * 1e-9);
  const bool ran = ex.operation == pipeline::Operation::kInfer && ex.infer_result.batch_size > 0;
  if (ran) {
    queue_.Get({model, version}).Observe(double(ex.infer_result.queue_ns) * 1e-9);
    compute_.Get({model, version}).Observe(double(ex.infer_result.compute_ns) * 1e-9);
    overhead_.Observe(double(total_ns - ex.infer_result.queue_ns - ex.infer_result.compute_ns) *
                      1e-9);
  }
  if (!access_log_.enabled()) return;
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
  if (ex.principal) record.principal = ex.principal->id;
  record.job = ex.job_id;
  record.duration_ns = total_ns;
  if (ran) {
    record.queue_ns = ex.infer_result.queue_ns;
    record.compute_ns = ex.infer_result.compute_ns;
    record.batch_size = ex.infer_result.batch_size;
  }
  record.request_bytes = int64_t(ex.body.size());
  record.response_bytes = ex.streaming ? ex.streamed_bytes : int64_t(ex.response.body.size());
  record.error = ex.error;
  access_log_.Write(record);
}

}  // namespace pillar::stages
