#include "runtime/return_promises.h"

#include <algorithm>
#include <cmath>

namespace pillar::runtime {

namespace {
constexpr int64_t kSecondNs = 1'000'000'000;
// How fast the share of callers who come back follows what they do (about the last 20 places).
constexpr double kReturnWeight = 0.05;
}  // namespace

int64_t ReturnPromises::Promise(uint64_t caller, uint64_t principal, int64_t now_ns,
                                double per_second, int64_t at_least_s) {
  at_least_s = std::max<int64_t>(1, at_least_s);
  if (caller == 0 || !(per_second > 0)) return at_least_s;
  Expire(now_ns);
  if (outstanding_ >= options_.max_outstanding) return at_least_s;
  // One place per caller (a connection waits for one answer at a time), and at most two seconds'
  // worth per principal, however many connections it opens: no caller takes every place.
  const int64_t quota = std::max<int64_t>(1, int64_t(std::floor(per_second * options_.share)));
  if (places_.contains(caller)) return at_least_s;
  if (principal != 0) {
    auto held = by_principal_.find(principal);
    if (held != by_principal_.end() && held->second >= 2 * quota) return at_least_s;
  }
  for (int64_t k = at_least_s; k <= options_.max_wait_s; ++k) {
    const int64_t due_ns = now_ns + k * kSecondNs;
    int64_t& booked = booked_[due_ns / kSecondNs];
    if (booked >= quota) continue;
    ++booked;
    ++pending_[due_ns / kSecondNs];
    if (principal != 0) ++by_principal_[principal];
    places_[caller] = Place{due_ns, principal};
    ++outstanding_;
    return k;
  }
  return at_least_s;  // nothing left to promise: the estimate, as a hint
}

bool ReturnPromises::Redeem(uint64_t caller, int64_t now_ns) {
  if (places_.empty() || caller == 0) return false;  // the common case: nothing booked
  Expire(now_ns);
  auto it = places_.find(caller);
  if (it == places_.end()) return false;
  const Place place = it->second;
  if (place.due_ns + options_.late_ns < now_ns) {  // missed
    places_.erase(it);
    Forget(place, /*redeemed=*/false);
    return false;
  }
  if (place.due_ns - options_.early_ns > now_ns) return false;  // too early: kept
  places_.erase(it);
  Forget(place, /*redeemed=*/true);
  return true;
}

void ReturnPromises::Forget(const Place& place, bool redeemed) {
  --outstanding_;
  return_rate_ += kReturnWeight * ((redeemed ? 1.0 : 0.0) - return_rate_);
  if (auto it = pending_.find(place.due_ns / kSecondNs);
      it != pending_.end() && --it->second <= 0) {
    pending_.erase(it);
  }
  if (auto it = by_principal_.find(place.principal);
      it != by_principal_.end() && --it->second <= 0) {
    by_principal_.erase(it);
  }
}

int64_t ReturnPromises::PendingBefore(int64_t until_ns) const {
  int64_t pending = 0;
  const int64_t last = (until_ns + options_.early_ns) / kSecondNs;  // callers come a little early
  for (auto it = pending_.begin(); it != pending_.end() && it->first <= last; ++it) {
    pending += it->second;
  }
  // Only the share of callers who have been coming back: places booked by callers who never
  // return (a client that reconnects, or one that means harm) must not count as load.
  return int64_t(std::ceil(double(pending) * return_rate_));
}

void ReturnPromises::Expire(int64_t now_ns) {
  if (now_ns < next_sweep_ns_) return;
  next_sweep_ns_ = now_ns + kSecondNs;
  const int64_t oldest = (now_ns - options_.late_ns) / kSecondNs - 1;
  booked_.erase(booked_.begin(), booked_.lower_bound(oldest));
  for (auto it = places_.begin(); it != places_.end();) {
    if (it->second.due_ns + options_.late_ns < now_ns) {
      const Place place = it->second;
      places_.erase(it++);
      Forget(place, /*redeemed=*/false);
    } else {
      ++it;
    }
  }
}

}  // namespace pillar::runtime
