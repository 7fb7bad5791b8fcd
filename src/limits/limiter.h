// Limits on requests (R-SEC-8): request and unit rates (GCRA), concurrent requests, and quotas
// per calendar day or month, counted per key, per tenant or per model as the policy's
// [[limit]] entries say. A Limiter decides a request's charges atomically: either every
// counter takes its charge, or none does and the verdict names the limit that refused.
//
//   Charge charges[] = {{&rule, "3f2a9c01d4e5", 1}};
//   absl::StatusOr<Verdict> v = limiter.AdmitNow(charges, request_id);   // synchronous ones
//   limiter.Admit(charges, request_id, [](absl::StatusOr<Verdict> v) {...});  // any
//   limiter.Release(concurrency_charges, request_id);   // when the response is on its way
//   limiter.Settle(token_adjustments, admitted_unix_s);  // a call's tokens, once it is counted
// An error status (never a refusal) means the limiter could not decide: its store is down.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "policy/policy.h"

namespace pillar::limits {

// One counter a request touches, and by how much. The views must stay valid during the call.
struct Charge {
  const policy::LimitRule* rule = nullptr;
  std::string_view subject;  // the key id, tenant or model name the limit counts by
  int64_t cost = 1;          // units: 1 for requests, the element count for elements
  // A per-tenant limit charged to a principal that has no tenant: `subject` is the principal's
  // id, and the counter lives apart from every tenant's (see kOwnCounterMark).
  bool by_principal = false;
};

// Follows the limit's name in the key of a `by_principal` counter. Limit names cannot hold
// '!', so no tenant, whatever it is called (a JWT claim can say anything), can share such a
// counter with a principal.
inline constexpr std::string_view kOwnCounterMark = "!principal";

struct Verdict {
  bool allowed = true;
  // For a refusal: the limit, the subject it counted, and the numbers the response carries.
  // For an admission with charges in tokens: the tightest of them after its charge (the one
  // with the fewest tokens remaining), in `charge_index`, `limit`, `remaining` and `reset_ms`;
  // charge_index is -1 when the request had none.
  const policy::LimitRule* rule = nullptr;
  std::string subject;
  int charge_index = -1;       // which of the request's charges refused
  int64_t limit = 0;           // RateLimit-Limit: burst, quota or concurrency
  int64_t remaining = 0;       // RateLimit-Remaining
  int64_t reset_ms = 0;        // RateLimit-Reset: until the limit is wholly available again
  int64_t retry_after_ms = 0;  // Retry-After; -1 when the request alone exceeds the limit
  int64_t renews_at_s = 0;     // quotas: Unix seconds when the period ends
};

class Limiter {
 public:
  using Done = absl::AnyInvocable<void(absl::StatusOr<Verdict>) &&>;
  virtual ~Limiter() = default;

  // True when AdmitNow() decides without waiting on anything (the embedded limiter).
  virtual bool synchronous() const = 0;
  [[nodiscard]] virtual absl::StatusOr<Verdict> AdmitNow(std::span<const Charge> charges,
                                                         std::string_view lease) = 0;
  // Calls `done` exactly once, possibly before returning, possibly from another thread.
  virtual void Admit(std::span<const Charge> charges, std::string_view lease, Done done) {
    std::move(done)(AdmitNow(charges, lease));
  }
  // Gives back the concurrency slots `lease` took; other charges are ignored.
  virtual void Release(std::span<const Charge> charges, std::string_view lease) = 0;
  // Corrects rate and quota counters by each charge's cost, which may be negative: a call
  // reserves tokens on arrival (its estimated prompt and the most it may generate) and settles
  // the difference with what it used once that is known. A settlement is never refused: a
  // counter may go past its limit (the next request then waits), or back down to empty but not
  // below. A quota settles in the period it was charged in (`admitted_unix_s`); a refund for a
  // period that has ended is dropped, and a further charge counts in the current period.
  virtual void Settle(std::span<const Charge> charges, int64_t admitted_unix_s) = 0;
};

// Whether a verdict for an admission should describe `charge`: rates and quotas in tokens.
inline bool ReportsRemaining(const Charge& charge) {
  return charge.rule->unit == policy::LimitRule::Unit::kTokens &&
         charge.rule->kind != policy::LimitRule::Kind::kConcurrency;
}

// The start of the quota period holding `unix_s` (UTC), and the start of the next one.
int64_t PeriodStart(policy::LimitRule::Period period, int64_t unix_s);
int64_t PeriodEnd(policy::LimitRule::Period period, int64_t unix_s);

}  // namespace pillar::limits
