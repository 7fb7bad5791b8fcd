#include "limits/redis_limiter.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <cstdio>

#include "absl/synchronization/notification.h"
#include "common/event_loop.h"
#include "common/strings.h"
#include "limits/resp_command.h"

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

std::string FormatDouble(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", v);
  return buf;
}

// Whether the numbers of a verdict are ones the script can give: a server that answers other
// numbers (a Retry-After of centuries, a negative remaining) is not trusted with them, since
// they go to the client as headers (review helper-54).
bool Plausible(const Verdict& v) {
  constexpr int64_t kMaxMs = int64_t{400} * 86'400'000;  // longer than any period
  constexpr int64_t kMaxUnits = int64_t{1} << 53;        // what the script's numbers hold exactly
  return v.charge_index >= -1 && v.charge_index < 4096 && v.limit >= 0 && v.limit <= kMaxUnits &&
         v.remaining >= 0 && v.remaining <= v.limit && v.reset_ms >= 0 && v.reset_ms <= kMaxMs &&
         (v.retry_after_ms == -1 || (v.retry_after_ms >= 0 && v.retry_after_ms <= kMaxMs)) &&
         v.renews_at_s >= 0 && v.renews_at_s < (int64_t{1} << 33);
}

[[nodiscard]] absl::StatusOr<Verdict> Checked(Verdict v) {
  if (!Plausible(v)) return absl::UnavailableError("redis: implausible numbers in the reply");
  return v;
}

[[nodiscard]] absl::StatusOr<Verdict> ParseReply(const redisReply* reply) {
  if (reply->type == REDIS_REPLY_ERROR) {
    return absl::UnavailableError(
        StrCat("redis: ", std::string_view(reply->str, std::min<size_t>(reply->len, 200))));
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
      if (reply->element[1]->integer < 0 || reply->element[1]->integer >= 4096) {
        return absl::UnavailableError("redis: implausible numbers in the reply");
      }
      admitted.charge_index = int(reply->element[1]->integer);
      admitted.limit = reply->element[2]->integer;
      admitted.remaining = reply->element[3]->integer;
      admitted.reset_ms = reply->element[4]->integer;
    }
    return Checked(admitted);
  }
  if (reply->elements != 7) return absl::UnavailableError("redis: unexpected refusal reply");
  int64_t v[7];
  for (size_t i = 0; i < 7; ++i) {
    if (reply->element[i]->type != REDIS_REPLY_INTEGER) {
      return absl::UnavailableError("redis: unexpected refusal reply");
    }
    v[i] = reply->element[i]->integer;
  }
  if (v[1] < 1 || v[1] > 4096)
    return absl::UnavailableError("redis: implausible numbers in the reply");
  Verdict verdict;
  verdict.allowed = false;
  verdict.charge_index = int(v[1] - 1);
  verdict.limit = v[2];
  verdict.remaining = v[3];
  verdict.reset_ms = v[4];
  verdict.retry_after_ms = v[5];
  verdict.renews_at_s = v[6];
  return Checked(verdict);
}

// Once per episode (ten seconds), not once per request that found the script gone.
void ReportLostScript() {
  static std::atomic<int64_t> last_ns{0};
  const int64_t now = SystemClock().MonotonicNanos();
  int64_t last = last_ns.load(std::memory_order_relaxed);
  if (now - last < int64_t{10'000'000'000} && last != 0) return;
  if (!last_ns.compare_exchange_strong(last, now)) return;
  std::fprintf(stderr, "pillar: limit store redis had lost a limit script; loading it again\n");
}

bool IsNoScript(const redisReply* reply) {
  return reply->type == REDIS_REPLY_ERROR &&
         std::string_view(reply->str, reply->len).starts_with("NOSCRIPT");
}

// Wraps the reply of an EVALSHA: a NOSCRIPT answer (Redis lost its scripts: SCRIPT FLUSH, a
// failover to a replica without them) loads `script` again and sends `command` once more, on the
// same connection and so in order after the load.
RedisLink::Reply LoadingScriptIfLost(const char* script, std::string command,
                                     RedisLink::Reply reply) {
  return [script, command = std::move(command), reply = std::move(reply)](
             RedisLink& link, absl::StatusOr<const redisReply*> answer) mutable {
    if (answer.ok() && IsNoScript(*answer)) {
      ReportLostScript();
      link.Send(RespCommand().Add("SCRIPT").Add("LOAD").Add(script).Take(), nullptr);
      link.Send(command, std::move(reply));
      return;
    }
    std::move(reply)(link, std::move(answer));
  };
}

// A reply nobody waits for: Redis's refusal is counted as an error, and so is a command lost to
// an outage when `count_outage` (a settlement; a release is not lost: its lease expires).
RedisLink::Reply CountingErrors(monitor::Counter* errors, bool count_outage) {
  return [errors, count_outage](RedisLink&, absl::StatusOr<const redisReply*> answer) {
    if (errors == nullptr) return;
    if (answer.ok() ? (*answer)->type == REDIS_REPLY_ERROR : count_outage) errors->Increment();
  };
}

// Wraps an admission's reply: when the admission failed after its command was written, Redis may
// still run it (a stall past the timeout) and take its concurrency slots, which no release would
// then give back until the lease expires (review helper-54); their ZREMs go first on the next
// connection.
RedisLink::Reply ReleasingIfLost(std::vector<std::string> releases, RedisLink::Reply reply) {
  if (releases.empty()) return reply;
  return [releases = std::move(releases), reply = std::move(reply)](
             RedisLink& link, absl::StatusOr<const redisReply*> answer) mutable {
    if (!answer.ok() && link.may_have_run()) {
      for (std::string& release : releases) link.SendOnReconnect(std::move(release));
    }
    std::move(reply)(link, std::move(answer));
  };
}

std::atomic<uint64_t> next_serial{1};

// The connection a thread last used, per limiter: a server's loop finds its own without a lock.
struct CachedLink {
  uint64_t serial = 0;
  const boost::asio::io_context* loop = nullptr;
  std::shared_ptr<RedisLink> link;
};
thread_local CachedLink cached_link;

}  // namespace

RedisLimiter::RedisLimiter(RedisLimiterOptions options)
    : options_([&] {
        RedisLimiterOptions kept = options;
        WipeString(kept.password);  // the group keeps the one copy
        return kept;
      }()),
      serial_(next_serial.fetch_add(1)),
      group_(std::make_shared<RedisLinkGroup>(
          RedisLinkOptions{
              .host = options.host,
              .port = options.port,
              .timeout = options.timeout,
              .max_pending = options.max_pending,
              .scripts = {kScript, kSettleScript},
              .up_gauge = options.metrics == nullptr
                              ? nullptr
                              : &options.metrics
                                     ->AddGauge("pillar_limiter_backend_up",
                                                "1 while the shared limit store (Redis) answers, "
                                                "else 0.")
                                     .Get(),
          },
          SecretString(std::move(options.password)))),
      own_work_(own_loop_.get_executor()) {
  if (options_.metrics != nullptr) {
    errors_ = &options_.metrics
                   ->AddCounter("pillar_limiter_backend_errors_total",
                                "Limit decisions the shared store (Redis) could not make.")
                   .Get();
  }
  own_link_ = RedisLink::Open(own_loop_, group_);
  // The first connection is made now, so that up() says early whether Redis answers.
  boost::asio::post(own_loop_, [link = own_link_] { link->ConnectNow(); });
  own_thread_ = std::thread([this] { own_loop_.run(); });
}

RedisLimiter::~RedisLimiter() {
  std::vector<std::shared_ptr<RedisLink>> links;
  {
    absl::MutexLock lock(&mu_);
    links.swap(links_);
  }
  // A loop still running closes its link itself; a loop already destroyed has closed it.
  for (const std::shared_ptr<RedisLink>& link : links) {
    if (!link->closed()) {
      boost::asio::post(link->loop(), [link] { link->Close("the limiter is stopping"); });
    }
  }
  boost::asio::post(own_loop_, [link = own_link_] { link->Close("the limiter is stopping"); });
  own_work_.reset();
  own_thread_.join();
}

uint64_t RedisLimiter::commands() const {
  uint64_t n = own_link_->commands();
  absl::MutexLock lock(&mu_);
  for (const std::shared_ptr<RedisLink>& link : links_) n += link->commands();
  return n;
}

uint64_t RedisLimiter::writes() const {
  uint64_t n = own_link_->writes();
  absl::MutexLock lock(&mu_);
  for (const std::shared_ptr<RedisLink>& link : links_) n += link->writes();
  return n;
}

std::string RedisLimiter::Key(char kind, const Charge& charge, int64_t now_s) const {
  std::string key = StrCat(options_.key_prefix, ":", kind, ":", charge.rule->name,
                           charge.by_principal ? kOwnCounterMark : "", ":", charge.subject);
  if (kind == 'q') StrAppend(&key, ":", PeriodStart(charge.rule->period, now_s));
  return key;
}

RedisLink& RedisLimiter::LinkOn(boost::asio::io_context& loop) {
  CachedLink& cache = cached_link;
  if (cache.serial == serial_ && cache.loop == &loop && !cache.link->closed()) {
    return *cache.link;
  }
  absl::MutexLock lock(&mu_);
  std::erase_if(links_, [](const std::shared_ptr<RedisLink>& l) { return l->closed(); });
  std::shared_ptr<RedisLink> found;
  for (const std::shared_ptr<RedisLink>& link : links_) {
    if (&link->loop() == &loop) found = link;
  }
  if (found == nullptr) {
    found = RedisLink::Open(loop, group_);
    links_.push_back(found);
  }
  cache = {serial_, &loop, found};
  return *found;
}

void RedisLimiter::Dispatch(std::string command, RedisLink::Reply reply, bool own_thread) {
  boost::asio::io_context* loop = own_thread ? nullptr : ThisThreadEventLoop();
  if (loop != nullptr) return LinkOn(*loop).Send(command, std::move(reply));
  boost::asio::post(
      own_loop_, [link = own_link_, command = std::move(command),
                  reply = std::move(reply)]() mutable { link->Send(command, std::move(reply)); });
}

std::string RedisLimiter::AdmitCommand(std::span<const Charge> charges,
                                       std::string_view lease) const {
  const int64_t now_s = options_.clock->UnixMicros() / 1'000'000;
  RespCommand command;
  command.Add("EVALSHA").Add(group_->script_shas()[0]).Add(int64_t(charges.size()));
  for (const Charge& c : charges) {
    const char kind = c.rule->kind == LimitRule::Kind::kRate          ? 'r'
                      : c.rule->kind == LimitRule::Kind::kConcurrency ? 'c'
                                                                      : 'q';
    command.Add(Key(kind, c, now_s));
  }
  command.Add(lease).Add(absl::ToInt64Microseconds(options_.lease_ttl));
  for (const Charge& c : charges) {
    const LimitRule& r = *c.rule;
    switch (r.kind) {
      case LimitRule::Kind::kRate:
        command.Add("r").Add(c.cost).Add(FormatDouble(1e6 / r.rate)).Add(r.burst);
        break;
      case LimitRule::Kind::kConcurrency:
        command.Add("c").Add("1").Add(r.max_concurrent).Add("0");
        break;
      case LimitRule::Kind::kQuota:
        command.Add("q").Add(c.cost).Add(r.quota).Add(PeriodEnd(r.period, now_s));
        break;
    }
    command.Add(ReportsRemaining(c) ? "1" : "0");
  }
  return command.Take();
}

void RedisLimiter::Admit(std::span<const Charge> charges, std::string_view lease, Done done) {
  if (charges.empty()) {
    std::move(done)(Verdict{});
    return;
  }
  std::string command = AdmitCommand(charges, lease);
  RedisLink::Reply reply = [errors = errors_, done = std::move(done)](
                               RedisLink&, absl::StatusOr<const redisReply*> answer) mutable {
    absl::StatusOr<Verdict> verdict =
        answer.ok() ? ParseReply(*answer) : absl::StatusOr<Verdict>(answer.status());
    if (!verdict.ok() && errors != nullptr) errors->Increment();
    std::move(done)(std::move(verdict));
  };
  std::string resend = command;
  Dispatch(std::move(command),
           LoadingScriptIfLost(kScript, std::move(resend),
                               ReleasingIfLost(ReleaseCommands(charges, lease), std::move(reply))));
}

absl::StatusOr<Verdict> RedisLimiter::AdmitNow(std::span<const Charge> charges,
                                               std::string_view lease) {
  if (charges.empty()) return Verdict{};
  absl::Notification ready;
  absl::StatusOr<Verdict> result;
  std::string command = AdmitCommand(charges, lease);
  RedisLink::Reply reply = [&](RedisLink&, absl::StatusOr<const redisReply*> answer) {
    result = answer.ok() ? ParseReply(*answer) : absl::StatusOr<Verdict>(answer.status());
    if (!result.ok() && errors_ != nullptr) errors_->Increment();
    ready.Notify();
  };
  std::string resend = command;
  Dispatch(std::move(command),
           LoadingScriptIfLost(kScript, std::move(resend),
                               ReleasingIfLost(ReleaseCommands(charges, lease), std::move(reply))),
           /*own_thread=*/true);
  ready.WaitForNotification();
  return result;
}

std::vector<std::string> RedisLimiter::ReleaseCommands(std::span<const Charge> charges,
                                                       std::string_view lease) const {
  std::vector<std::string> commands;
  for (const Charge& c : charges) {
    if (c.rule->kind != LimitRule::Kind::kConcurrency) continue;
    commands.push_back(RespCommand().Add("ZREM").Add(Key('c', c, 0)).Add(lease).Take());
  }
  return commands;
}

void RedisLimiter::Release(std::span<const Charge> charges, std::string_view lease) {
  // While Redis is down the lease is not released here: it expires on its own (lease_ttl).
  for (std::string& release : ReleaseCommands(charges, lease)) {
    Dispatch(std::move(release), CountingErrors(errors_, /*count_outage=*/false));
  }
}

std::string RedisLimiter::SettleCommand(std::span<const Charge> charges,
                                        int64_t admitted_unix_s) const {
  const int64_t now_s = options_.clock->UnixMicros() / 1'000'000;
  int64_t count = 0;
  std::vector<std::string> key_list;
  std::vector<std::string> arg_list;
  for (const Charge& c : charges) {
    const LimitRule& r = *c.rule;
    if (c.cost == 0 || r.kind == LimitRule::Kind::kConcurrency) continue;
    if (r.kind == LimitRule::Kind::kRate) {
      key_list.push_back(Key('r', c, now_s));
      arg_list.insert(arg_list.end(), {"r", StrCat(c.cost), FormatDouble(1e6 / r.rate)});
    } else {
      const bool period_ended =
          PeriodStart(r.period, admitted_unix_s) != PeriodStart(r.period, now_s);
      if (c.cost < 0 && period_ended) continue;
      key_list.push_back(Key('q', c, now_s));
      arg_list.insert(arg_list.end(), {"q", StrCat(c.cost), StrCat(PeriodEnd(r.period, now_s))});
    }
    ++count;
  }
  if (count == 0) return "";
  RespCommand command;
  command.Add("EVALSHA").Add(group_->script_shas()[1]).Add(count);
  for (const std::string& key : key_list) command.Add(key);
  for (const std::string& arg : arg_list) command.Add(arg);
  return command.Take();
}

void RedisLimiter::Settle(std::span<const Charge> charges, int64_t admitted_unix_s) {
  std::string command = SettleCommand(charges, admitted_unix_s);
  if (command.empty()) return;
  std::string resend = command;
  Dispatch(std::move(command), LoadingScriptIfLost(kSettleScript, std::move(resend),
                                                   CountingErrors(errors_, /*count_outage=*/true)));
}

}  // namespace pillar::limits
