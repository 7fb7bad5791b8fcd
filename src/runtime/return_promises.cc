#include "runtime/return_promises.h"

#include <algorithm>
#include <cmath>

namespace pillar::runtime {

namespace {
constexpr int64_t kSecondNs = 1'000'000'000;
}  // namespace

int64_t ReturnPromises::Promise(uint64_t caller, int64_t now_ns, double per_second,
                                int64_t at_least_s) {
  at_least_s = std::max<int64_t>(1, at_least_s);
  if (caller == 0 || !(per_second > 0)) return at_least_s;
  Expire(now_ns);
  if (outstanding_ >= options_.max_outstanding) return at_least_s;
  const int64_t quota = std::max<int64_t>(1, int64_t(std::floor(per_second * options_.share)));
  for (int64_t k = at_least_s; k <= options_.max_wait_s; ++k) {
    const int64_t due_ns = now_ns + k * kSecondNs;
    int64_t& booked = booked_[due_ns / kSecondNs];
    if (booked >= quota) continue;
    ++booked;
    ++pending_[due_ns / kSecondNs];
    std::deque<int64_t>& places = places_[caller];
    places.insert(std::upper_bound(places.begin(), places.end(), due_ns), due_ns);
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
  std::deque<int64_t>& places = it->second;
  while (!places.empty() && places.front() + options_.late_ns < now_ns) {
    Forget(places.front());  // missed
    places.pop_front();
  }
  bool redeemed = false;
  if (!places.empty() && places.front() - options_.early_ns <= now_ns) {
    Forget(places.front());
    places.pop_front();
    redeemed = true;
  }
  if (places.empty()) places_.erase(it);
  return redeemed;
}

void ReturnPromises::Forget(int64_t due_ns) {
  --outstanding_;
  auto it = pending_.find(due_ns / kSecondNs);
  if (it != pending_.end() && --it->second <= 0) pending_.erase(it);
}

int64_t ReturnPromises::PendingBefore(int64_t until_ns) const {
  int64_t pending = 0;
  const int64_t last = (until_ns + options_.early_ns) / kSecondNs;  // callers come a little early
  for (auto it = pending_.begin(); it != pending_.end() && it->first <= last; ++it) {
    pending += it->second;
  }
  return pending;
}

void ReturnPromises::Expire(int64_t now_ns) {
  if (now_ns < next_sweep_ns_) return;
  next_sweep_ns_ = now_ns + kSecondNs;
  const int64_t oldest = (now_ns - options_.late_ns) / kSecondNs - 1;
  booked_.erase(booked_.begin(), booked_.lower_bound(oldest));
  for (auto it = places_.begin(); it != places_.end();) {
    std::deque<int64_t>& places = it->second;
    while (!places.empty() && places.front() + options_.late_ns < now_ns) {
      Forget(places.front());
      places.pop_front();
    }
    if (places.empty()) {
      places_.erase(it++);
    } else {
      ++it;
    }
  }
}

}  // namespace pillar::runtime
