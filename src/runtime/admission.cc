#include "runtime/admission.h"

#include <algorithm>

#include "common/strings.h"
#include "runtime/runner.h"

namespace pillar::runtime {

std::string_view PriorityName(Priority priority) {
  switch (priority) {
    case Priority::kHigh:
      return "high";
    case Priority::kNormal:
      return "normal";
    case Priority::kLow:
      return "low";
  }
  return "normal";
}

std::optional<Priority> ParsePriority(std::string_view text) {
  if (text == "high") return Priority::kHigh;
  if (text == "normal") return Priority::kNormal;
  if (text == "low") return Priority::kLow;
  return std::nullopt;
}

int64_t QueueLimit(Priority priority, int64_t max_queue) {
  if (max_queue <= 0) return 0;
  switch (priority) {
    case Priority::kHigh:
      return max_queue;
    case Priority::kNormal:
      return std::max<int64_t>(1, max_queue - max_queue / 10);
    case Priority::kLow:
      return std::max<int64_t>(1, (max_queue + 1) / 2);
  }
  return max_queue;
}

[[nodiscard]] absl::Status Shed(std::string_view message, int64_t retry_after_s,
                                bool for_deadline) {
  absl::Status status = UnavailableWithRetry(message, std::max<int64_t>(1, retry_after_s));
  status.SetPayload(ToAbsl(kShedPayload), absl::Cord(for_deadline ? "deadline" : "queue"));
  return status;
}

bool IsShed(const absl::Status& status) {
  return status.GetPayload(ToAbsl(kShedPayload)).has_value();
}

bool IsShedForDeadline(const absl::Status& status) {
  const auto payload = status.GetPayload(ToAbsl(kShedPayload));
  return payload.has_value() && *payload == "deadline";
}

bool MissesDeadline(int64_t wait_ns, int64_t now_ns, int64_t deadline_ns) {
  return deadline_ns > 0 && now_ns + wait_ns > deadline_ns;
}

int64_t CeilSeconds(int64_t ns) { return std::max<int64_t>(1, (ns + 999'999'999) / 1'000'000'000); }

[[nodiscard]] absl::Status ShedForDeadline(int64_t wait_ns, int64_t retry_after_s) {
  return Shed(
      StrCat("the estimated wait (", wait_ns / 1'000'000, " ms) exceeds the request's deadline"),
      retry_after_s, /*for_deadline=*/true);
}

}  // namespace pillar::runtime
