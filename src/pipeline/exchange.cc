#include "pipeline/exchange.h"

#include "common/json_writer.h"
#include "common/strings.h"
#include "runtime/admission.h"

namespace pillar::pipeline {

bool TargetsModel(Operation op) {
  return op == Operation::kModelMetadata || op == Operation::kModelReady || op == Operation::kInfer;
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

void Exchange::Fail(const absl::Status& status) {
  response.status = runtime::IsBadGateway(status) ? 502 : HttpStatusFor(status.code());
  response.content_type = "application/json";
  error = std::string(status.message());
  std::string body;
  body.reserve(error.size() + 16);
  body.append("{\"error\":");
  AppendJsonString(body, error);
  body.push_back('}');
  response.body = std::move(body);
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
