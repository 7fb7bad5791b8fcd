// How a model's queue decides, before a request waits in it, whether it should: the request's
// priority class bounds how much of the queue it may fill, and a request whose estimated wait
// already exceeds its deadline is refused at once (with a Retry-After from the estimate) instead
// of timing out in the queue. Shared by the runners (BatchingRunner, upstream::RemoteRunner).
//
//   if (queued >= QueueLimit(request.priority, max_queue)) return Shed(...);
//   if (MissesDeadline(wait_ns, now_ns, request.deadline_ns)) return ShedForDeadline(wait_ns, s);
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "protocol/tensor.h"

namespace pillar::runtime {

using Priority = protocol::Priority;

std::string_view PriorityName(Priority priority);
// "high", "normal" or "low"; none for anything else.
std::optional<Priority> ParsePriority(std::string_view text);

// How many requests may be queued when one of `priority` arrives: all of `max_queue` for high,
// all but a tenth for normal (kept for high), half for low. Under pressure the lower class is
// refused first, and a queue of 1 holds one request of any class (of 0, none).
int64_t QueueLimit(Priority priority, int64_t max_queue);

// A refusal of load (503 with Retry-After); IsShed() tells it from other 503s, for metrics.
// One for the caller's own deadline (IsShedForDeadline) says nothing of the server's state: the
// HTTP answer carries `X-Pillar-Shed: deadline`, so that a pillar gateway in front neither pauses
// nor counts against the endpoint for it (one client's short deadlines must not take a replica
// out for everyone).
inline constexpr std::string_view kShedPayload = "pillar/shed";
inline constexpr std::string_view kShedHeader = "X-Pillar-Shed";
[[nodiscard]] absl::Status Shed(std::string_view message, int64_t retry_after_s,
                                bool for_deadline = false);
bool IsShed(const absl::Status& status);
bool IsShedForDeadline(const absl::Status& status);

// Whether a request whose estimated wait (`wait_ns`, from now) ends past its deadline
// (`deadline_ns`, 0: none) should be refused, and the refusal, with the Retry-After the runner
// chose (the estimate, or a place kept for it: ReturnPromises).
bool MissesDeadline(int64_t wait_ns, int64_t now_ns, int64_t deadline_ns);
[[nodiscard]] absl::Status ShedForDeadline(int64_t wait_ns, int64_t retry_after_s);
// Nanoseconds rounded up to whole seconds, at least 1: a Retry-After.
int64_t CeilSeconds(int64_t ns);

}  // namespace pillar::runtime
