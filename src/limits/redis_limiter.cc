#include "limits/redis_limiter.h"

#include <hiredis/hiredis.h>

#include <cstdio>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/crypto.h"
#include "common/strings.h"

namespace pillar::limits {
namespace {

using policy::LimitRule;

// ARGV: lease, lease TTL (us), then per key: kind, cost, a, b, report.
//   r (rate):        a = emission interval (us per unit), b = burst (units)
//   c (concurrency): a = maximum in flight
//   q (quota):       a = quota, b = end of the period (Unix s); the key names the period
//   report:          1 for a charge the admission's reply describes (ReportsRemaining)
// Returns {1} when every charge fits (and takes them all), or {1, index, limit, remaining,
// reset_ms} for the reported charge with the fewest units left after it; else
// {0, index, limit, remaining, reset_ms, retry_after_ms, renews_at_s} for the first that does
// not fit (and takes none). Numbers written back are formatted explicitly: Lua would print a
// microsecond timestamp with 14 significant digits and lose precision.
constexpr const char* kScript = R"lua(
local t = redis.call('TIME')
local now_s = tonumber(t[1])
local now_us = now_s * 1000000 + tonumber(t[2])
local lease = ARGV[1]
local lease_ttl_us = tonumber(ARGV[2])
local new_tat = {}  -- per key: the new TAT (rate) or the usage before (quota)
for i = 1, #KEYS do
  local o = 2 + (i - 1) * 5
  local kind, cost = ARGV[o + 1], tonumber(ARGV[o + 2])
  local a, b = tonumber(ARGV[o + 3]), tonumber(ARGV[o + 4])
  if kind == 'r' then
    local tat = tonumber(redis.call('GET', KEYS[i]) or 0)
    if tat < now_us then tat = now_us end
    local nt = tat + cost * a
    local tolerance = a * b
    if nt - now_us > tolerance then
      local retry = -1
      if cost <= b then retry = math.ceil((nt - now_us - tolerance) / 1000) end
      local remaining = math.floor((tolerance - (tat - now_us)) / a)
      if remaining < 0 then remaining = 0 end
      return {0, i, b, remaining, math.ceil((tat - now_us) / 1000), retry, 0}
    end
    new_tat[i] = nt
  elseif kind == 'c' then
    -- Expired leases (holders that died) are purged only when the set looks full.
    if redis.call('ZCARD', KEYS[i]) + 1 > a then
      redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', string.format('%.0f', now_us))
      if redis.call('ZCARD', KEYS[i]) + 1 > a then return {0, i, a, 0, 1000, 1000, 0} end
    end
  else
    local used = tonumber(redis.call('GET', KEYS[i]) or 0)
    new_tat[i] = used
    if used + cost > a then
      local retry = (b - now_s) * 1000
      if cost > a then retry = -1 end
      local remaining = a - used
      if remaining < 0 then remaining = 0 end
      return {0, i, a, remaining, (b - now_s) * 1000, retry, b}
    end
  end
end
local best = nil
local function describe(i, limit, remaining, reset_ms)
  if remaining < 0 then remaining = 0 end
  if remaining > limit then remaining = limit end
  if best == nil or remaining < best[3] then best = {i - 1, limit, remaining, reset_ms} end
end
for i = 1, #KEYS do
  local o = 2 + (i - 1) * 5
  local kind, cost, b = ARGV[o + 1], tonumber(ARGV[o + 2]), tonumber(ARGV[o + 4])
  local a, report = tonumber(ARGV[o + 3]), ARGV[o + 5] == '1'
  if kind == 'r' then
    redis.call('SET', KEYS[i], string.format('%.3f', new_tat[i]),
               'PX', math.ceil((new_tat[i] - now_us) / 1000) + 1000)
    if report then
      describe(i, b, math.floor((a * b - (new_tat[i] - now_us)) / a),
               math.ceil((new_tat[i] - now_us) / 1000))
    end
  elseif kind == 'c' then
    redis.call('ZADD', KEYS[i], string.format('%.0f', now_us + lease_ttl_us), lease)
    redis.call('PEXPIRE', KEYS[i], math.ceil(lease_ttl_us / 1000) + 1000)
  else
    redis.call('INCRBY', KEYS[i], cost)
    -- The key names its period; it expires a day after the period ends.
    if new_tat[i] == 0 then redis.call('EXPIREAT', KEYS[i], b + 86400) end
    if report then describe(i, a, a - new_tat[i] - cost, (b - now_s) * 1000) end
  end
end
if best ~= nil then return {1, best[1], best[2], best[3], best[4]} end
return {1}
)lua";

// A settlement (Limiter::Settle), never refused. ARGV per key: kind, units (negative: a
// refund), a (rate: emission interval, us per unit; quota: end of the period, Unix s). A rate's
// arrival time moves by the units, not back past now; a quota's usage, not below zero.
constexpr const char* kSettleScript = R"lua(
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
for i = 1, #KEYS do
  local o = (i - 1) * 3
  local kind, units, a = ARGV[o + 1], tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3])
  if kind == 'r' then
    local tat = tonumber(redis.call('GET', KEYS[i]) or 0)
    if tat < now_us then tat = now_us end
    local nt = tat + units * a
    if nt > now_us then
      redis.call('SET', KEYS[i], string.format('%.3f', nt), 'PX', math.ceil((nt - now_us) / 1000) + 1000)
    else
      redis.call('DEL', KEYS[i])
    end
  else
    local used = tonumber(redis.call('GET', KEYS[i]) or 0)
    if used + units < 0 then units = -used end
    if units ~= 0 then
      redis.call('INCRBY', KEYS[i], units)
      redis.call('EXPIREAT', KEYS[i], a + 86400)
    end
  end
end
return 1
)lua";

constexpr size_t kMaxBatch = 512;

std::string FormatDouble(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", v);
  return buf;
}

[[nodiscard]] absl::StatusOr<Verdict> ParseReply(const redisReply* reply) {
  if (reply->type == REDIS_REPLY_ERROR) {
    return absl::UnavailableError(StrCat("redis: ", std::string_view(reply->str, reply->len)));
  }
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1 ||
      reply->element[0]->type != REDIS_REPLY_INTEGER) {
    return absl::UnavailableError("redis: unexpected reply to the limit script");
  }
  if (reply->element[0]->integer == 1) {
    Verdict admitted;
    if (reply->elements == 5) {
      for (size_t i = 1; i < 5; ++i) {
        if (reply->element[i]->type != REDIS_REPLY_INTEGER) {
          return absl::UnavailableError("redis: unexpected admission reply");
        }
      }
      admitted.charge_index = int(reply->element[1]->integer);
      admitted.limit = reply->element[2]->integer;
      admitted.remaining = reply->element[3]->integer;
      admitted.reset_ms = reply->element[4]->integer;
    }
    return admitted;
  }
  if (reply->elements != 7) return absl::UnavailableError("redis: unexpected refusal reply");
  int64_t v[7];
  for (size_t i = 0; i < 7; ++i) {
    if (reply->element[i]->type != REDIS_REPLY_INTEGER) {
      return absl::UnavailableError("redis: unexpected refusal reply");
    }
    v[i] = reply->element[i]->integer;
  }
  Verdict verdict;
  verdict.allowed = false;
  verdict.charge_index = int(v[1] - 1);
  verdict.limit = v[2];
  verdict.remaining = v[3];
  verdict.reset_ms = v[4];
  verdict.retry_after_ms = v[5];
  verdict.renews_at_s = v[6];
  return verdict;
}

}  // namespace

RedisLimiter::RedisLimiter(RedisLimiterOptions options)
    : password_(std::move(options.password)),
      options_(std::move(options)),
      script_sha_(HexEncode(Sha1(kScript))) {
  if (options_.metrics != nullptr) {
    up_gauge_ = &options_.metrics
                     ->AddGauge("pillar_limiter_backend_up",
                                "1 while the shared limit store (Redis) answers, else 0.")
                     .Get();
    errors_ = &options_.metrics
                   ->AddCounter("pillar_limiter_backend_errors_total",
                                "Limit decisions the shared store (Redis) could not make.")
                   .Get();
  }
  thread_ = std::thread([this] { Loop(); });
}

RedisLimiter::~RedisLimiter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
  if (context_ != nullptr) redisFree(context_);
}

std::string RedisLimiter::Key(char kind, const Charge& charge, int64_t now_s) const {
  std::string key = StrCat(options_.key_prefix, ":", kind, ":", charge.rule->name,
                           charge.by_principal ? kOwnCounterMark : "", ":", charge.subject);
  if (kind == 'q') StrAppend(&key, ":", PeriodStart(charge.rule->period, now_s));
  return key;
}

void RedisLimiter::Enqueue(Command command) {
  {
    absl::MutexLock lock(&mu_);
    if (queue_.size() < options_.max_pending) {
      queue_.push_back(std::move(command));
      return;
    }
  }
  if (errors_ != nullptr) errors_->Increment();
  if (command.done) std::move(command.done)(absl::UnavailableError("redis: too many pending"));
}

void RedisLimiter::Admit(std::span<const Charge> charges, std::string_view lease, Done done) {
  if (!up_.load() && options_.clock->MonotonicNanos() < retry_at_ns_.load()) {
    if (errors_ != nullptr) errors_->Increment();
    std::move(done)(absl::UnavailableError("limit store redis unreachable"));
    return;
  }
  if (charges.empty()) {
    std::move(done)(Verdict{});
    return;
  }
  const int64_t now_s = options_.clock->UnixMicros() / 1'000'000;
  Command command;
  command.args.reserve(6 + charges.size() * 6);
  command.args.push_back("EVALSHA");
  command.args.push_back(script_sha_);
  command.args.push_back(StrCat(charges.size()));
  for (const Charge& c : charges) {
    const char kind = c.rule->kind == LimitRule::Kind::kRate          ? 'r'
                      : c.rule->kind == LimitRule::Kind::kConcurrency ? 'c'
                                                                      : 'q';
    command.args.push_back(Key(kind, c, now_s));
  }
  command.args.push_back(std::string(lease));
  command.args.push_back(StrCat(absl::ToInt64Microseconds(options_.lease_ttl)));
  for (const Charge& c : charges) {
    const LimitRule& r = *c.rule;
    switch (r.kind) {
      case LimitRule::Kind::kRate:
        command.args.insert(command.args.end(),
                            {"r", StrCat(c.cost), FormatDouble(1e6 / r.rate), StrCat(r.burst)});
        break;
      case LimitRule::Kind::kConcurrency:
        command.args.insert(command.args.end(), {"c", "1", StrCat(r.max_concurrent), "0"});
        break;
      case LimitRule::Kind::kQuota:
        command.args.insert(command.args.end(), {"q", StrCat(c.cost), StrCat(r.quota),
                                                 StrCat(PeriodEnd(r.period, now_s))});
        break;
    }
    command.args.push_back(ReportsRemaining(c) ? "1" : "0");
  }
  command.done = std::move(done);
  Enqueue(std::move(command));
}

absl::StatusOr<Verdict> RedisLimiter::AdmitNow(std::span<const Charge> charges,
                                               std::string_view lease) {
  absl::Notification ready;
  absl::StatusOr<Verdict> result;
  Admit(charges, lease, [&](absl::StatusOr<Verdict> v) {
    result = std::move(v);
    ready.Notify();
  });
  ready.WaitForNotification();
  return result;
}

void RedisLimiter::Release(std::span<const Charge> charges, std::string_view lease) {
  if (!up_.load()) return;  // the lease expires on its own after lease_ttl
  for (const Charge& c : charges) {
    if (c.rule->kind != LimitRule::Kind::kConcurrency) continue;
    Enqueue(Command{{"ZREM", Key('c', c, 0), std::string(lease)}, nullptr});
  }
}

void RedisLimiter::Settle(std::span<const Charge> charges, int64_t admitted_unix_s) {
  const int64_t now_s = options_.clock->UnixMicros() / 1'000'000;
  Command command;
  command.args = {"EVAL", kSettleScript, ""};
  std::vector<std::string> args;
  size_t keys = 0;
  for (const Charge& c : charges) {
    const LimitRule& r = *c.rule;
    if (c.cost == 0 || r.kind == LimitRule::Kind::kConcurrency) continue;
    if (r.kind == LimitRule::Kind::kRate) {
      command.args.push_back(Key('r', c, now_s));
      args.insert(args.end(), {"r", StrCat(c.cost), FormatDouble(1e6 / r.rate)});
    } else {
      const bool period_ended =
          PeriodStart(r.period, admitted_unix_s) != PeriodStart(r.period, now_s);
      if (c.cost < 0 && period_ended) continue;
      command.args.push_back(Key('q', c, now_s));
      args.insert(args.end(), {"q", StrCat(c.cost), StrCat(PeriodEnd(r.period, now_s))});
    }
    ++keys;
  }
  if (keys == 0) return;
  if (!up_.load()) {  // lost: the reservation stands as the charge
    if (errors_ != nullptr) errors_->Increment();
    return;
  }
  command.args[2] = StrCat(keys);
  command.args.insert(command.args.end(), std::make_move_iterator(args.begin()),
                      std::make_move_iterator(args.end()));
  Enqueue(std::move(command));
}

bool RedisLimiter::Connect() {
  timeval tv{};
  const int64_t us = absl::ToInt64Microseconds(options_.timeout);
  tv.tv_sec = us / 1'000'000;
  tv.tv_usec = us % 1'000'000;
  redisContext* c = redisConnectWithTimeout(options_.host.c_str(), options_.port, tv);
  std::string error;
  if (c == nullptr) {
    error = "out of memory";
  } else if (c->err) {
    error = c->errstr;
  } else {
    redisSetTimeout(c, tv);
    auto command = [&](std::vector<std::string> args) -> redisReply* {
      std::vector<const char*> argv;
      std::vector<size_t> lens;
      for (const std::string& a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
      }
      return static_cast<redisReply*>(
          redisCommandArgv(c, int(argv.size()), argv.data(), lens.data()));
    };
    if (!password_.empty()) {
      // Straight from password_: a std::string argument would be a copy freed unwiped.
      const char* argv[] = {"AUTH", password_.data()};
      const size_t lens[] = {4, password_.size()};
      auto* r = static_cast<redisReply*>(redisCommandArgv(c, 2, argv, lens));
      if (r == nullptr || r->type == REDIS_REPLY_ERROR) error = "AUTH refused";
      if (r) freeReplyObject(r);
    }
    if (error.empty()) {
      redisReply* r = command({"SCRIPT", "LOAD", kScript});
      if (r != nullptr && r->type == REDIS_REPLY_STRING) {
        if (std::string_view(r->str, r->len) != script_sha_) error = "script digest mismatch";
      } else {
        error = r == nullptr                   ? std::string(c->errstr)
                : r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len)
                                               : "SCRIPT LOAD failed";
      }
      if (r) freeReplyObject(r);
    }
  }
  if (!error.empty()) {
    if (c != nullptr) redisFree(c);
    Disconnect(error);
    return false;
  }
  context_ = c;
  if (!up_.exchange(true) || !last_error_.empty()) {
    std::fprintf(stderr, "pillar: limit store redis %s:%d reachable\n", options_.host.c_str(),
                 options_.port);
  }
  last_error_.clear();
  if (up_gauge_ != nullptr) up_gauge_->Set(1);
  return true;
}

void RedisLimiter::Disconnect(std::string_view why_view) {
  const std::string why(why_view);  // it may point into the context freed below
  if (context_ != nullptr) {
    redisFree(context_);
    context_ = nullptr;
  }
  const bool was_up = up_.exchange(false);
  if (up_gauge_ != nullptr) up_gauge_->Set(0);
  // Fail fast for a while, then let the loop try again.
  retry_at_ns_.store(options_.clock->MonotonicNanos() +
                     absl::ToInt64Nanoseconds(absl::Milliseconds(200)));
  if (was_up || last_error_.empty()) {
    std::fprintf(stderr, "pillar: limit store redis %s:%d unreachable: %s\n", options_.host.c_str(),
                 options_.port, why.c_str());
  }
  last_error_ = why;
}

bool RedisLimiter::LoadScript() {
  auto* r = static_cast<redisReply*>(redisCommand(context_, "SCRIPT LOAD %s", kScript));
  const bool ok = r != nullptr && r->type == REDIS_REPLY_STRING &&
                  std::string_view(r->str, r->len) == script_sha_;
  if (r != nullptr) freeReplyObject(r);
  return ok;
}

void RedisLimiter::Run(std::vector<Command>& batch, bool retry_missing_script) {
  if (context_ == nullptr && !Connect()) {
    for (Command& c : batch) {
      if (errors_ != nullptr && c.done) errors_->Increment();
      if (c.done)
        std::move(c.done)(absl::UnavailableError(StrCat("redis unreachable: ", last_error_)));
    }
    return;
  }
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (Command& c : batch) {
    argv.clear();
    lens.clear();
    for (const std::string& a : c.args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    redisAppendCommandArgv(context_, int(argv.size()), argv.data(), lens.data());
  }
  size_t answered = 0;
  std::vector<Command> missing_script;  // answered NOSCRIPT: Redis lost the script (a SCRIPT
                                        // FLUSH, a failover to a replica without it)
  for (; answered < batch.size(); ++answered) {
    void* raw = nullptr;
    if (redisGetReply(context_, &raw) != REDIS_OK || raw == nullptr) break;
    auto* reply = static_cast<redisReply*>(raw);
    Command& c = batch[answered];
    if (c.done && retry_missing_script && reply->type == REDIS_REPLY_ERROR &&
        std::string_view(reply->str, reply->len).starts_with("NOSCRIPT")) {
      missing_script.push_back(std::move(c));
    } else if (c.done) {
      absl::StatusOr<Verdict> verdict = ParseReply(reply);
      if (!verdict.ok() && errors_ != nullptr) errors_->Increment();
      std::move(c.done)(std::move(verdict));
    } else if (reply->type == REDIS_REPLY_ERROR && errors_ != nullptr) {
      errors_->Increment();  // a release or settlement Redis refused
    }
    freeReplyObject(reply);
  }
  if (answered < batch.size()) {
    Disconnect(context_->errstr[0] ? context_->errstr : "connection lost");
    for (size_t i = answered; i < batch.size(); ++i) {
      if (batch[i].done) {
        if (errors_ != nullptr) errors_->Increment();
        std::move(batch[i].done)(absl::UnavailableError(StrCat("redis: ", last_error_)));
      }
    }
  }
  if (missing_script.empty()) return;
  if (context_ != nullptr && LoadScript()) {
    std::fprintf(stderr, "pillar: limit store redis had lost the limit script; loaded it again\n");
    Run(missing_script, /*retry_missing_script=*/false);
    return;
  }
  for (Command& c : missing_script) {
    if (errors_ != nullptr) errors_->Increment();
    std::move(c.done)(absl::UnavailableError("redis: the limit script cannot be loaded"));
  }
}

void RedisLimiter::Loop() {
  // The first connection is made here, before any Admit() can pass `up_`.
  Connect();
  std::vector<Command> batch;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      // While down, wake up to retry the connection even without traffic, so recovery does
      // not wait for a request that fail-fast would never let through.
      mu_.AwaitWithTimeout(absl::Condition(&ready),
                           up_.load() ? absl::Seconds(1) : absl::Milliseconds(200));
      if (stopping_ && queue_.empty()) return;
      const size_t n = std::min(queue_.size(), kMaxBatch);
      batch.assign(std::make_move_iterator(queue_.begin()),
                   std::make_move_iterator(queue_.begin() + long(n)));
      queue_.erase(queue_.begin(), queue_.begin() + long(n));
    }
    if (batch.empty()) {
      if (context_ == nullptr) Connect();
      continue;
    }
    Run(batch, /*retry_missing_script=*/true);
    batch.clear();
  }
}

}  // namespace pillar::limits
