#include "runtime/runner.h"

#include "common/strings.h"

namespace pillar::runtime {

std::string_view OpenAiPath(OpenAiRoute route) {
  switch (route) {
    case OpenAiRoute::kChatCompletions:
      return "/v1/chat/completions";
    case OpenAiRoute::kCompletions:
      return "/v1/completions";
    case OpenAiRoute::kEmbeddings:
      return "/v1/embeddings";
  }
  return "/v1/chat/completions";
}

void Runner::Generate(GenerateRequest, InferCallback done) {
  std::move(done)(absl::FailedPreconditionError(
      "the model does not speak the OpenAI API: call it with the Open Inference Protocol "
      "(/v2/models/{model}/infer)"));
}

[[nodiscard]] absl::Status WithRetryAfter(absl::Status status, int64_t seconds) {
  status.SetPayload(ToAbsl(kRetryAfterPayload), absl::Cord(StrCat(seconds)));
  return status;
}

[[nodiscard]] absl::Status UnavailableWithRetry(std::string_view message, int64_t seconds) {
  return WithRetryAfter(absl::UnavailableError(ToAbsl(message)), seconds);
}

[[nodiscard]] absl::Status BadGateway(std::string_view message) {
  absl::Status status = absl::UnavailableError(ToAbsl(message));
  status.SetPayload(ToAbsl(kBadGatewayPayload), absl::Cord("502"));
  return status;
}

bool IsBadGateway(const absl::Status& status) {
  return status.GetPayload(ToAbsl(kBadGatewayPayload)).has_value();
}

namespace {
constexpr std::string_view kRefusedPayload = "pillar/upstream-refused";
}  // namespace

[[nodiscard]] absl::Status RefusedUpstream(std::string_view message) {
  absl::Status status = BadGateway(message);
  status.SetPayload(ToAbsl(kRefusedPayload), absl::Cord("4xx"));
  return status;
}

bool IsRefusedUpstream(const absl::Status& status) {
  return status.GetPayload(ToAbsl(kRefusedPayload)).has_value();
}

std::optional<int64_t> RetryAfterSeconds(const absl::Status& status) {
  auto payload = status.GetPayload(ToAbsl(kRetryAfterPayload));
  int64_t seconds;
  if (!payload || !ParseInt(std::string(*payload), &seconds)) return std::nullopt;
  return seconds;
}

}  // namespace pillar::runtime
