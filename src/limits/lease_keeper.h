// The concurrency leases a Redis limiter's requests hold, so that one held longer than the
// lease's time to live (a stream of minutes against a lease_ttl of a minute) is renewed before
// it expires: otherwise Redis would drop it while its request still runs, and the limit would
// admit one request more than it allows (review helper-101). The lease's time to live stays
// what frees the slots of an instance that dies.
//
//   LeaseKeeper keeper;
//   keeper.Hold("lease-1", {"pillar:c:slots:m"}, now);     // admitted
//   for (auto& [key, leases] : keeper.Due(now, ttl / 3)) ...  // renew these (ZADD XX)
//   keeper.Drop("lease-1");                                // released
//
// Thread-safe: admissions and releases come from every event loop, renewals from one thread.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace pillar::limits {

class LeaseKeeper {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // `lease` holds a slot in each of `keys` since `now`.
  void Hold(std::string lease, std::vector<std::string> keys, TimePoint now);
  // `lease` gave its slots back (or never held any).
  void Drop(std::string_view lease);
  // The leases held, or last renewed, `age` or longer before `now`, by slot key, in no
  // particular order; they count as renewed at `now`.
  [[nodiscard]] std::vector<std::pair<std::string, std::vector<std::string>>> Due(
      TimePoint now, std::chrono::steady_clock::duration age);
  size_t held() const;

 private:
  struct Held {
    std::vector<std::string> keys;
    TimePoint renewed;
  };
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Held> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pillar::limits
