#include "limits/local_limiter.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "absl/container/inlined_vector.h"
#include "common/strings.h"
#include "common/thread_name.h"

namespace pillar::limits {

using policy::LimitRule;

int64_t PeriodStart(LimitRule::Period period, int64_t unix_s) {
  if (period == LimitRule::Period::kDay) return unix_s - unix_s % 86400;
  std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  tm.tm_mday = 1;
  tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
  return int64_t(timegm(&tm));
}

int64_t PeriodEnd(LimitRule::Period period, int64_t unix_s) {
  if (period == LimitRule::Period::kDay) return PeriodStart(period, unix_s) + 86400;
  std::time_t t = static_cast<std::time_t>(PeriodStart(period, unix_s));
  std::tm tm{};
  gmtime_r(&t, &tm);
  tm.tm_mon += 1;  // timegm normalizes December + 1 into January of the next year
  return int64_t(timegm(&tm));
}

namespace {

constexpr int64_t kNanosPerSecond = 1'000'000'000;
// A theoretical arrival time this far out (about 126 years of monotonic clock) means "not in
// this process's lifetime"; capping there keeps every conversion to int64 defined.
constexpr double kMaxTatNs = 4e18;

// Nanoseconds as whole milliseconds, rounded up, within [0, 1e15] (about 31,000 years).
int64_t ClampedMillis(double ns) { return int64_t(std::clamp(std::ceil(ns / 1e6), 0.0, 1e15)); }

// The counter's identity: kind, limit name and subject. A limit keeps its counters across
// policy reloads as long as its name and kind stay.
std::string& KeyFor(const Charge& charge) {
  thread_local std::string key;
  key.clear();
  const char kind = charge.rule->kind == LimitRule::Kind::kRate          ? 'r'
                    : charge.rule->kind == LimitRule::Kind::kConcurrency ? 'c'
                                                                         : 'q';
  StrAppend(&key, kind, "|", charge.rule->name, charge.by_principal ? kOwnCounterMark : "", "|",
            charge.subject);
  return key;
}

}  // namespace

LocalLimiter::LocalLimiter(LocalLimiterOptions options) : options_(options) {}

LocalLimiter::~LocalLimiter() {
  wakeup_.Stop();
  if (flusher_.joinable()) flusher_.join();
  if (absl::Status s = FlushQuotas(); !s.ok()) {
    std::fprintf(stderr, "pillar: quota usage not saved at exit: %s\n",
                 std::string(s.message()).c_str());
  }
}

absl::Status LocalLimiter::LoadQuotas() {
  if (options_.store == nullptr) return absl::OkStatus();
  const int64_t now_s = options_.clock->UnixMicros() / 1'000'000;
  // Monthly periods start no later than daily ones: one read covers both.
  absl::StatusOr<std::vector<state::QuotaUsage>> usage =
      options_.store->LoadQuotaUsage(PeriodStart(LimitRule::Period::kMonth, now_s));
  if (!usage.ok()) return usage.status();
  {
    absl::MutexLock lock(&mu_);
    for (const state::QuotaUsage& u : *usage) {
      Counter& c = counters_[StrCat("q|", u.counter)];
      c.period = u.period_start == PeriodStart(LimitRule::Period::kMonth, u.period_start)
                     ? LimitRule::Period::kMonth
                     : LimitRule::Period::kDay;
      if (u.period_start >= c.period_start) {
        c.period_start = u.period_start;
        c.used = u.used;
      }
    }
  }
  if (options_.flush_interval > absl::ZeroDuration()) {
    flusher_ = std::thread([this] {
      NameThisThread("limits-flush");
      FlushLoop();
    });
  }
  return absl::OkStatus();
}

absl::Status LocalLimiter::FlushQuotas() {
  if (options_.store == nullptr) return absl::OkStatus();
  absl::MutexLock flush_lock(&flush_mu_);
  std::vector<state::QuotaUsage> deltas;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, pending] : unflushed_) {
      deltas.push_back({key.substr(2), pending.first, pending.second});
    }
    unflushed_.clear();
  }
  absl::Status s = options_.store->AddQuotaUsage(deltas);
  if (!s.ok()) {
    // Put the deltas back so the next flush retries them.
    absl::MutexLock lock(&mu_);
    for (const state::QuotaUsage& d : deltas) {
      auto& pending = unflushed_[StrCat("q|", d.counter)];
      if (pending.first == d.period_start || pending.first == 0) {
        pending.first = d.period_start;
        pending.second += d.used;
      }
    }
  }
  return s;
}

void LocalLimiter::FlushLoop() {
  bool failing = false;
  while (wakeup_.Wait(options_.flush_interval)) {
    absl::Status s = FlushQuotas();
    Prune();
    if (!s.ok() && !failing) {
      std::fprintf(stderr, "pillar: writing quota usage failed (will retry): %s\n",
                   std::string(s.message()).c_str());
    }
    failing = !s.ok();
  }
}

size_t LocalLimiter::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_.size();
}

void LocalLimiter::Prune() {
  const int64_t now_ns = options_.clock->MonotonicNanos();
  const int64_t now_s = options_.clock->UnixMicros() / 1'000'000;
  absl::MutexLock lock(&mu_);
  // Named here, where the analysis sees mu_ held; it does not follow into the lambda.
  const auto* unflushed = &unflushed_;
  absl::erase_if(counters_, [&](const auto& entry) {
    const auto& [key, c] = entry;
    switch (key[0]) {
      case 'r':
        return c.tat_ns <= now_ns;
      case 'c':
        return c.in_flight == 0;
      default:
        return c.period_start < PeriodStart(c.period, now_s) && !unflushed->contains(key);
    }
  });
}

LocalLimiter::Counter& LocalLimiter::CounterFor(const Charge& charge) {
  std::string& key = KeyFor(charge);
  auto it = counters_.find(key);
  if (it != counters_.end()) return it->second;
  return counters_[key];
}

std::optional<Verdict> LocalLimiter::Check(const Charge& charge, Counter& counter, int64_t now_ns,
                                           int64_t now_s) {
  const LimitRule& rule = *charge.rule;
  Verdict v;
  v.allowed = false;
  v.rule = &rule;
  v.subject = std::string(charge.subject);
  switch (rule.kind) {
    case LimitRule::Kind::kRate: {
      // GCRA: each unit advances the theoretical arrival time by the emission interval; a
      // request fits while that time stays within `burst` intervals of now.
      const double interval_ns = double(kNanosPerSecond) * double(options_.divisor) / rule.rate;
      const int64_t burst = Scaled(rule.burst);
      const double tolerance_ns = interval_ns * double(burst);
      const int64_t tat = std::max(counter.tat_ns, now_ns);
      const double new_tat = double(tat) + interval_ns * double(charge.cost);
      if (new_tat - double(now_ns) <= tolerance_ns) return std::nullopt;
      v.limit = burst;
      v.remaining = int64_t(std::clamp(
          std::floor((tolerance_ns - double(tat - now_ns)) / interval_ns), 0.0, double(burst)));
      v.reset_ms = ClampedMillis(double(tat - now_ns));
      v.retry_after_ms =
          charge.cost > burst ? -1 : ClampedMillis(new_tat - double(now_ns) - tolerance_ns);
      return v;
    }
    case LimitRule::Kind::kConcurrency: {
      const int64_t max = Scaled(rule.max_concurrent);
      if (counter.in_flight + 1 <= max) return std::nullopt;
      v.limit = max;
      v.remaining = 0;
      v.reset_ms = 1000;
      v.retry_after_ms = 1000;
      return v;
    }
    case LimitRule::Kind::kQuota: {
      const int64_t quota = Scaled(rule.quota);
      const int64_t start = PeriodStart(rule.period, now_s);
      const int64_t used = counter.period_start == start ? counter.used : 0;
      if (used + charge.cost <= quota) return std::nullopt;
      v.limit = quota;
      v.remaining = std::max<int64_t>(0, quota - used);
      v.renews_at_s = PeriodEnd(rule.period, now_s);
      v.reset_ms = (v.renews_at_s - now_s) * 1000;
      v.retry_after_ms = charge.cost > quota ? -1 : v.reset_ms;
      return v;
    }
  }
  return std::nullopt;
}

void LocalLimiter::Take(const Charge& charge, Counter& counter, int64_t now_ns, int64_t now_s) {
  const LimitRule& rule = *charge.rule;
  switch (rule.kind) {
    case LimitRule::Kind::kRate: {
      const double interval_ns = double(kNanosPerSecond) * double(options_.divisor) / rule.rate;
      // In floating point, capped: a slow rate times a large cost may not fit in 64 bits.
      counter.tat_ns = int64_t(std::min(
          double(std::max(counter.tat_ns, now_ns)) + interval_ns * double(charge.cost), kMaxTatNs));
      return;
    }
    case LimitRule::Kind::kConcurrency:
      ++counter.in_flight;
      return;
    case LimitRule::Kind::kQuota: {
      const int64_t start = PeriodStart(rule.period, now_s);
      if (counter.period_start != start) {
        counter.period_start = start;
        counter.used = 0;
      }
      AddUsage(charge, counter, start, charge.cost);
      return;
    }
  }
}

absl::StatusOr<Verdict> LocalLimiter::AdmitNow(std::span<const Charge> charges, std::string_view) {
  const int64_t now_ns = options_.clock->MonotonicNanos();
  const int64_t now_s = options_.clock->UnixMicros() / 1'000'000;
  // Pointers into the map stay valid while nothing is inserted, so every insertion happens
  // before the first pointer is kept.
  absl::InlinedVector<Counter*, 8> counters(charges.size());
  absl::MutexLock lock(&mu_);
  for (const Charge& charge : charges) (void)CounterFor(charge);
  for (size_t i = 0; i < charges.size(); ++i) counters[i] = &CounterFor(charges[i]);
  for (size_t i = 0; i < charges.size(); ++i) {
    if (std::optional<Verdict> refused = Check(charges[i], *counters[i], now_ns, now_s)) {
      refused->charge_index = int(i);
      return *std::move(refused);
    }
  }
  Verdict admitted;
  for (size_t i = 0; i < charges.size(); ++i) {
    Take(charges[i], *counters[i], now_ns, now_s);
    if (ReportsRemaining(charges[i])) {
      Describe(charges[i], int(i), *counters[i], now_ns, now_s, admitted);
    }
  }
  return admitted;
}

void LocalLimiter::Describe(const Charge& charge, int index, const Counter& counter, int64_t now_ns,
                            int64_t now_s, Verdict& out) const {
  const LimitRule& rule = *charge.rule;
  int64_t limit = 0;
  int64_t remaining = 0;
  int64_t reset_ms = 0;
  if (rule.kind == LimitRule::Kind::kRate) {
    const double interval_ns = double(kNanosPerSecond) * double(options_.divisor) / rule.rate;
    limit = Scaled(rule.burst);
    const double ahead_ns = double(std::max(counter.tat_ns, now_ns) - now_ns);
    remaining = int64_t(std::clamp(
        std::floor((interval_ns * double(limit) - ahead_ns) / interval_ns), 0.0, double(limit)));
    reset_ms = ClampedMillis(ahead_ns);
  } else if (rule.kind == LimitRule::Kind::kQuota) {
    limit = Scaled(rule.quota);
    remaining = std::max<int64_t>(0, limit - counter.used);
    reset_ms = (PeriodEnd(rule.period, now_s) - now_s) * 1000;
  } else {
    return;
  }
  if (out.charge_index >= 0 && remaining >= out.remaining) return;
  out.charge_index = index;
  out.limit = limit;
  out.remaining = remaining;
  out.reset_ms = reset_ms;
}

void LocalLimiter::Settle(std::span<const Charge> charges, int64_t admitted_unix_s) {
  const int64_t now_ns = options_.clock->MonotonicNanos();
  const int64_t now_s = options_.clock->UnixMicros() / 1'000'000;
  absl::MutexLock lock(&mu_);
  for (const Charge& charge : charges) {
    const LimitRule& rule = *charge.rule;
    if (charge.cost == 0 || rule.kind == LimitRule::Kind::kConcurrency) continue;
    if (rule.kind == LimitRule::Kind::kRate) {
      auto it = counters_.find(KeyFor(charge));
      // A bucket that was pruned has refilled: nothing to give back.
      if (it == counters_.end() && charge.cost < 0) continue;
      Counter& c = it != counters_.end() ? it->second : CounterFor(charge);
      const double interval_ns = double(kNanosPerSecond) * double(options_.divisor) / rule.rate;
      const double tat = double(std::max(c.tat_ns, now_ns)) + interval_ns * double(charge.cost);
      c.tat_ns = int64_t(std::clamp(tat, double(now_ns), kMaxTatNs));
      continue;
    }
    const int64_t start = PeriodStart(rule.period, now_s);
    if (charge.cost < 0 && PeriodStart(rule.period, admitted_unix_s) != start) continue;
    Counter& c = CounterFor(charge);
    if (c.period_start != start) {
      c.period_start = start;
      c.used = 0;
    }
    AddUsage(charge, c, start, std::max(charge.cost, -c.used));  // never below empty
  }
}

void LocalLimiter::AddUsage(const Charge& charge, Counter& counter, int64_t start, int64_t units) {
  counter.period = charge.rule->period;
  counter.used += units;
  if (options_.store == nullptr || units == 0) return;
  auto& pending = unflushed_[KeyFor(charge)];
  if (pending.first != start) pending = {start, 0};
  pending.second += units;
}

void LocalLimiter::Release(std::span<const Charge> charges, std::string_view) {
  absl::MutexLock lock(&mu_);
  for (const Charge& charge : charges) {
    if (charge.rule->kind != LimitRule::Kind::kConcurrency) continue;
    auto it = counters_.find(KeyFor(charge));
    if (it != counters_.end() && it->second.in_flight > 0) --it->second.in_flight;
  }
}

}  // namespace pillar::limits
