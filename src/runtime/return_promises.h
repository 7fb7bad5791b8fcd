// Keeps the promise of a Retry-After under sustained overload. A queue that sheds a request
// tells its caller when to come back; under load that does not let up, the queue is as full
// then as now, and a caller who obeyed is refused again. So each such answer books a place: a
// share of each coming second's measured capacity is kept for callers coming back, the caller is
// told the first second with a place left, and a request from that caller in that second takes
// its place: at the front of its own priority class, past the class's share of the queue and the
// wait estimate. Callers are told apart by a hash of their principal and connection (the execute
// stage's), so a client sharing a key with others finds its own place when it comes back on the
// same connection; one that comes back on a new connection is a new caller.
//
// Against abuse: one place per caller at a time, at most two seconds' worth per principal (how
// many connections it opens does not matter), and the places counted in other requests' wait
// estimates are weighted by the share of places recently taken, so places booked by callers who
// never come back do not pass for load.
//
//   if (promises.Redeem(request.caller, now_ns)) { /* admit ahead of the queue */ }
//   int64_t retry_s = promises.Promise(request.caller, now_ns, served_per_second, estimate_s);
// Not thread-safe: a runner calls it under its own lock (or on its own thread).
#pragma once

#include <cstdint>
#include <map>

#include "absl/container/flat_hash_map.h"

namespace pillar::runtime {

class ReturnPromises {
 public:
  struct Options {
    double share = 0.5;               // of each second's capacity kept for returns
    int64_t max_wait_s = 60;          // no place promised further out than this
    int64_t max_outstanding = 4096;   // places booked at once, for all callers
    int64_t early_ns = 250'000'000;   // a caller a little early still redeems
    int64_t late_ns = 2'000'000'000;  // and one a little late
  };

  ReturnPromises() : ReturnPromises(Options{}) {}
  explicit ReturnPromises(Options options) : options_(options) {}

  // The Retry-After, in seconds (at least `at_least_s`, at least 1), for `caller` (0: unknown) of
  // `principal` shed at `now_ns` by a queue that serves `per_second` requests a second; books that
  // second's place. With no place left within max_wait_s, the caller or principal holding its
  // share already, or nothing measured yet: `at_least_s`, unbooked.
  int64_t Promise(uint64_t caller, uint64_t principal, int64_t now_ns, double per_second,
                  int64_t at_least_s);
  // True, consuming it, when `caller` holds a place due at `now_ns`.
  bool Redeem(uint64_t caller, int64_t now_ns);

  // Places not yet taken that fall due by `until_ns` (or are due now): callers who will go ahead
  // of a request queued now, which its wait estimate must count.
  int64_t PendingBefore(int64_t until_ns) const;

  int64_t outstanding() const { return outstanding_; }

 private:
  void Expire(int64_t now_ns);

  const Options options_;
  struct Place {
    int64_t due_ns = 0;
    uint64_t principal = 0;
  };
  void Forget(const Place& place, bool redeemed);  // a place taken or missed

  // Places booked per second (the second is due_ns / 1e9), taken or not: what was promised.
  std::map<int64_t, int64_t> booked_;
  // Of those, the places not yet taken or missed.
  std::map<int64_t, int64_t> pending_;
  // Each caller's place.
  absl::flat_hash_map<uint64_t, Place> places_;
  // Places held per principal.
  absl::flat_hash_map<uint64_t, int64_t> by_principal_;
  // The share of places recently taken (a moving average; 1 until places were missed).
  double return_rate_ = 1.0;
  int64_t outstanding_ = 0;
  int64_t next_sweep_ns_ = 0;
};

}  // namespace pillar::runtime
