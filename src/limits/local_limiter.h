// The embedded limiter: every counter in this process's memory under one mutex, so each
// decision is exact (all of a request's charges are checked, then all taken, atomically).
// Quota usage is written to the state store every `flush_interval` and read back on start, so
// a restart does not hand out a day's quota twice; a crash loses at most one interval of
// counts (docs/security.md states the bound).
//
//   LocalLimiter limiter({.store = store.get()});
//   PILLAR_RETURN_IF_ERROR(limiter.LoadQuotas());
//   absl::StatusOr<Verdict> v = limiter.AdmitNow(charges, request_id);
// With `divisor` N it enforces 1/N of every limit: the fallback of N instances that share a
// Redis that is down, so that together they stay within the configured limit.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/wakeup.h"
#include "limits/limiter.h"
#include "state/state_store.h"

namespace pillar::limits {

struct LocalLimiterOptions {
  int64_t divisor = 1;
  state::StateStore* store = nullptr;  // null: quotas live in memory only
  absl::Duration flush_interval = absl::Seconds(1);
  Clock* clock = &SystemClock();
};

class LocalLimiter final : public Limiter {
 public:
  explicit LocalLimiter(LocalLimiterOptions options);
  ~LocalLimiter() override;

  // Reads the current periods' quota usage from the store and starts the flush thread.
  [[nodiscard]] absl::Status LoadQuotas();
  [[nodiscard]] absl::Status FlushQuotas();
  size_t counters() const;

  bool synchronous() const override { return true; }
  [[nodiscard]] absl::StatusOr<Verdict> AdmitNow(std::span<const Charge> charges,
                                                 std::string_view lease) override;
  void Release(std::span<const Charge> charges, std::string_view lease) override;
  void Settle(std::span<const Charge> charges, int64_t admitted_unix_s) override;

 private:
  struct Counter {
    int64_t tat_ns = 0;  // GCRA: theoretical arrival time, monotonic clock
    int64_t in_flight = 0;
    int64_t period_start = 0;
    int64_t used = 0;
    policy::LimitRule::Period period = policy::LimitRule::Period::kDay;
  };
  // The limit's numbers after the divisor.
  int64_t Scaled(int64_t amount) const { return std::max<int64_t>(1, amount / options_.divisor); }
  Counter& CounterFor(const Charge& charge) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The verdict when `charge` does not fit; nullopt when it does.
  std::optional<Verdict> Check(const Charge& charge, Counter& counter, int64_t now_ns,
                               int64_t now_s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Take(const Charge& charge, Counter& counter, int64_t now_ns, int64_t now_s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds `units` (negative: gives back) to a quota counter of the period starting at `start`,
  // and to what the store has not been told yet.
  void AddUsage(const Charge& charge, Counter& counter, int64_t start, int64_t units)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What is left of `charge`'s limit after its charge (Verdict's admission fields).
  // Kept in `out` when it has fewer units remaining than what `out` describes already.
  void Describe(const Charge& charge, int index, const Counter& counter, int64_t now_ns,
                int64_t now_s, Verdict& out) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FlushLoop();
  // Drops counters that hold nothing a fresh one would not: rate buckets that refilled, idle
  // concurrency counters, quotas of past periods. Keeps memory bounded by the principals
  // active recently, not by every principal ever seen.
  void Prune();

  const LocalLimiterOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Counter> counters_ ABSL_GUARDED_BY(mu_);
  // Quota usage not yet written: counter key -> (period start, units).
  absl::flat_hash_map<std::string, std::pair<int64_t, int64_t>> unflushed_ ABSL_GUARDED_BY(mu_);
  Wakeup wakeup_;  // the flush thread sleeps on it, not on mu_ (common/wakeup.h says why)
  absl::Mutex flush_mu_;
  std::thread flusher_;
};

}  // namespace pillar::limits
