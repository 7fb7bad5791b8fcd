#include "runtime/runner.h"

#include "common/strings.h"

namespace pillar::runtime {

absl::Status WithRetryAfter(absl::Status status, int64_t seconds) {
  status.SetPayload(ToAbsl(kRetryAfterPayload), absl::Cord(StrCat(seconds)));
  return status;
}

absl::Status UnavailableWithRetry(std::string_view message, int64_t seconds) {
  return WithRetryAfter(absl::UnavailableError(ToAbsl(message)), seconds);
}

std::optional<int64_t> RetryAfterSeconds(const absl::Status& status) {
  auto payload = status.GetPayload(ToAbsl(kRetryAfterPayload));
  int64_t seconds;
  if (!payload || !ParseInt(std::string(*payload), &seconds)) return std::nullopt;
  return seconds;
}

}  // namespace pillar::runtime
