#include "pipeline/exchange.h"

#include "common/json_writer.h"
#include "common/strings.h"
#include "http/server.h"
#include "protocol/openai_response.h"
#include "runtime/admission.h"

namespace pillar::pipeline {

bool GeneratesText(Operation op) {
  return op == Operation::kChatCompletions || op == Operation::kCompletions ||
         op == Operation::kEmbeddings;
}

bool OpenAiShaped(Operation op) { return op == Operation::kListModels || GeneratesText(op); }

bool TargetsModel(Operation op) {
  return op == Operation::kModelMetadata || op == Operation::kModelReady ||
         op == Operation::kInfer || GeneratesText(op);
}

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kFailedPrecondition:
      return 400;
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

namespace {

// OpenAI's error types and codes by HTTP status, as its API and its clients use them (the
// official clients choose their exception by the status; the type and code are for people).
std::string OpenAiErrorBodyFor(int status, std::string_view message) {
  std::string_view type = "invalid_request_error", code;
  switch (status) {
    case 401:
      type = "authentication_error";
      code = "invalid_api_key";
      break;
    case 403:
      type = "permission_error";
      break;
    case 404:
      code = "not_found";
      break;
    case 429:
      type = "rate_limit_error";
      code = "rate_limit_exceeded";
      break;
    default:
      if (status >= 500) type = "server_error";
  }
  return protocol::OpenAiErrorBody(message, type, code);
}

}  // namespace

std::string StreamErrorEvent(const absl::Status& status) {
  const int code = runtime::IsBadGateway(status) ? 502 : HttpStatusFor(status.code());
  return StrCat("data: ", OpenAiErrorBodyFor(code, ToStd(status.message())), "\n\n");
}

void Exchange::StartStream(Response head) {
  streaming = true;
  sink->StartStream(std::move(head));
}

void Exchange::WriteChunk(std::string bytes, absl::AnyInvocable<void(bool) &&> written) {
  streamed_bytes += int64_t(bytes.size());
  sink->WriteChunk(std::move(bytes), std::move(written));
}

std::shared_ptr<const WaitMeter> Exchange::StreamWaits() {
  return sink != nullptr ? sink->stream_waits() : nullptr;
}

void Exchange::OnClientGone(absl::AnyInvocable<void() &&> gone) {
  if (sink != nullptr) sink->OnClientGone(std::move(gone));
}

void Exchange::ReplaceError(std::string message) {
  error = std::move(message);
  if (OpenAiShaped(operation)) {
    response.body = OpenAiErrorBodyFor(response.status, error);
    return;
  }
  std::string body;
  body.reserve(error.size() + 16);
  body.append("{\"error\":");
  AppendJsonString(body, error);
  body.push_back('}');
  response.body = std::move(body);
}

void Exchange::Fail(const absl::Status& status) {
  response.status = runtime::IsBadGateway(status) ? 502 : HttpStatusFor(status.code());
  response.content_type = "application/json";
  ReplaceError(std::string(status.message()));
  if (std::optional<int64_t> retry = runtime::RetryAfterSeconds(status)) {
    response.headers.emplace_back("Retry-After", StrCat(*retry));
  }
  if (runtime::IsShedForDeadline(status)) {
    response.headers.emplace_back(runtime::kShedHeader, "deadline");
  }
  if (response.status == 401) {
    response.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"pillar\"");
  }
}

}  // namespace pillar::pipeline
