#include "limits/redis_limiter.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <cstdio>

#include "absl/synchronization/notification.h"
#include "common/event_loop.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "limits/redis_replies.h"
#include "limits/redis_scripts.h"
#include "limits/resp_command.h"

namespace pillar::limits {
namespace {

using policy::LimitRule;

std::string FormatDouble(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", v);
  return buf;
}

std::atomic<uint64_t> next_serial{1};

}  // namespace

struct RedisLimiter::Batch {
  struct Spec {  // the charges of one or more admissions, in RESP
    std::string keys;
    int64_t key_count = 0;
    std::string args;
    int64_t arg_count = 0;
  };
  std::vector<Spec> specs;
  RespCommand admissions;     // per admission: its spec (1-based) and its lease
  std::vector<Done> waiting;  // per admission, in order
  SlotReleases slots;         // every admission's concurrency slots, released if it is lost
};

// Holds what sending a batch needs and nothing of the limiter's: a flush posted to a loop may
// run after the limiter is gone (its link, closed, then answers Unavailable).
struct RedisLimiter::LoopLink {
  std::shared_ptr<RedisLink> link;
  std::shared_ptr<RedisLinkGroup> group;
  int64_t lease_ttl_us = 0;
  monitor::Counter* errors = nullptr;
  Batch batch;
  SlotReleases releases;  // the slots requests of this turn gave back
  bool flush_posted = false;
};

namespace {

// The connection a thread last used, per limiter: a server's loop finds its own without a lock.
struct CachedLink {
  uint64_t serial = 0;
  const boost::asio::io_context* loop = nullptr;
  std::shared_ptr<RedisLimiter::LoopLink> link;
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
              .scripts = {kAdmitScript, kSettleScript, kRenewScript},
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
  boost::asio::post(own_loop_, [this] { RenewLater(); });
  own_thread_ = std::thread([this] {
    NameThisThread("limits-redis");
    own_loop_.run();
  });
}

RedisLimiter::~RedisLimiter() {
  std::vector<std::shared_ptr<LoopLink>> links;
  {
    absl::MutexLock lock(&mu_);
    links.swap(links_);
  }
  // A loop still running closes its link itself (after a flush it had posted, whose admissions
  // the closing link answers Unavailable); a loop already destroyed has closed it.
  for (const std::shared_ptr<LoopLink>& on : links) {
    if (!on->link->closed()) {
      boost::asio::post(on->link->loop(),
                        [link = on->link] { link->Close("the limiter is stopping"); });
    }
  }
  boost::asio::post(own_loop_, [this] {
    stopping_ = true;  // a renewal already due must not set the timer again
    renew_timer_.cancel();
    own_link_->Close("the limiter is stopping");
  });
  own_work_.reset();
  own_thread_.join();
}

uint64_t RedisLimiter::commands() const {
  uint64_t n = own_link_->commands();
  absl::MutexLock lock(&mu_);
  for (const std::shared_ptr<LoopLink>& on : links_) n += on->link->commands();
  return n;
}

uint64_t RedisLimiter::writes() const {
  uint64_t n = own_link_->writes();
  absl::MutexLock lock(&mu_);
  for (const std::shared_ptr<LoopLink>& on : links_) n += on->link->writes();
  return n;
}

std::string RedisLimiter::Key(char kind, const Charge& charge, int64_t now_s) const {
  std::string key = StrCat(options_.key_prefix, ":", kind, ":", charge.rule->name,
                           charge.by_principal ? kOwnCounterMark : "", ":", charge.subject);
  if (kind == 'q') StrAppend(&key, ":", PeriodStart(charge.rule->period, now_s));
  return key;
}

RedisLimiter::LoopLink& RedisLimiter::LinkOn(boost::asio::io_context& loop) {
  CachedLink& cache = cached_link;
  if (cache.serial == serial_ && cache.loop == &loop && !cache.link->link->closed()) {
    return *cache.link;
  }
  absl::MutexLock lock(&mu_);
  std::erase_if(links_, [](const std::shared_ptr<LoopLink>& l) { return l->link->closed(); });
  std::shared_ptr<LoopLink> found;
  for (const std::shared_ptr<LoopLink>& on : links_) {
    if (&on->link->loop() == &loop) found = on;
  }
  if (found == nullptr) {
    found = std::make_shared<LoopLink>();
    found->link = RedisLink::Open(loop, group_);
    found->group = group_;
    found->lease_ttl_us = absl::ToInt64Microseconds(options_.lease_ttl);
    found->errors = errors_;
    links_.push_back(found);
  }
  cache = {serial_, &loop, found};
  return *found;
}

void RedisLimiter::Dispatch(std::string command, RedisLink::Reply reply,
                            RedisLink::Pending pending) {
  boost::asio::io_context* loop = ThisThreadEventLoop();
  if (loop != nullptr) return LinkOn(*loop).link->Send(command, std::move(reply), pending);
  boost::asio::post(own_loop_,
                    [link = own_link_, command = std::move(command), reply = std::move(reply),
                     pending]() mutable { link->Send(command, std::move(reply), pending); });
}

RespCommand RedisLimiter::Spec(std::span<const Charge> charges, RespCommand& keys) const {
  const int64_t now_s = options_.clock->UnixMicros() / 1'000'000;
  RespCommand args;
  args.Add(int64_t(charges.size()));
  for (const Charge& c : charges) {
    const LimitRule& r = *c.rule;
    switch (r.kind) {
      case LimitRule::Kind::kRate:
        keys.Add(Key('r', c, now_s));
        args.Add("r").Add(c.cost).Add(FormatDouble(1e6 / r.rate)).Add(r.burst);
        break;
      case LimitRule::Kind::kConcurrency:
        keys.Add(Key('c', c, now_s));
        args.Add("c").Add("1").Add(r.max_concurrent).Add("0");
        break;
      case LimitRule::Kind::kQuota:
        keys.Add(Key('q', c, now_s));
        args.Add("q").Add(c.cost).Add(r.quota).Add(PeriodEnd(r.period, now_s));
        break;
    }
    args.Add(ReportsRemaining(c) ? "1" : "0");
  }
  return args;
}

void RedisLimiter::Gather(Batch& batch, std::span<const Charge> charges, std::string_view lease,
                          Done done) const {
  RespCommand keys;
  RespCommand args = Spec(charges, keys);
  size_t spec = 0;
  while (spec < batch.specs.size() &&
         (batch.specs[spec].keys != keys.encoded() || batch.specs[spec].args != args.encoded())) {
    ++spec;
  }
  if (spec == batch.specs.size()) {
    batch.specs.push_back(
        {std::string(keys.encoded()), keys.count(), std::string(args.encoded()), args.count()});
  }
  batch.admissions.Add(int64_t(spec + 1)).Add(lease);
  std::vector<std::string> slot_keys;
  for (const Charge& c : charges) {
    if (c.rule->kind == LimitRule::Kind::kConcurrency) slot_keys.push_back(Key('c', c, 0));
  }
  if (!slot_keys.empty()) {
    // Held from its admission to its release, and renewed meanwhile.
    done = [leases = leases_, lease = std::string(lease), slot_keys,
            done = std::move(done)](absl::StatusOr<Verdict> verdict) mutable {
      if (verdict.ok() && verdict->allowed) {
        leases->Hold(std::move(lease), std::move(slot_keys), std::chrono::steady_clock::now());
      }
      std::move(done)(std::move(verdict));
    };
    for (std::string& key : slot_keys) batch.slots.Add(std::move(key), lease);
  }
  batch.waiting.push_back(std::move(done));
}

// The script's reply to a full batch (an array of one array of at most seven integers per
// admission) stays within what a reply may hold, or every full batch would drop the connection.
static_assert(RedisLimiter::kMaxBatch <= size_t(ReplyReader::kMaxElements) &&
              1 + RedisLimiter::kMaxBatch * (1 + 7) <= ReplyReader::kMaxObjects);

void RedisLimiter::SendBatch(RedisLink& link, Batch batch, const RedisLinkGroup& group,
                             int64_t lease_ttl_us, monitor::Counter* errors) {
  RespCommand command;
  int64_t keys = 0;
  for (const Batch::Spec& spec : batch.specs) keys += spec.key_count;
  command.Add("EVALSHA").Add(group.script_shas()[0]).Add(keys);
  for (const Batch::Spec& spec : batch.specs) command.AddEncoded(spec.keys, spec.key_count);
  command.Add(int64_t(batch.specs.size()));
  for (const Batch::Spec& spec : batch.specs) command.AddEncoded(spec.args, spec.arg_count);
  command.Add(lease_ttl_us).AddEncoded(batch.admissions.encoded(), batch.admissions.count());
  std::string text = command.Take();
  // Each admission gets its verdict from the reply, an array with one per admission, in order;
  // a reply of another shape, or none, fails them all.
  RedisLink::Reply answer = [errors, waiting = std::move(batch.waiting)](
                                RedisLink&, absl::StatusOr<const redisReply*> reply) mutable {
    if (reply.ok() && (*reply)->type == REDIS_REPLY_ARRAY && (*reply)->elements == waiting.size()) {
      for (size_t i = 0; i < waiting.size(); ++i) {
        absl::StatusOr<Verdict> verdict = ParseVerdict((*reply)->element[i]);
        if (!verdict.ok() && errors != nullptr) errors->Increment();
        std::move(waiting[i])(std::move(verdict));
      }
      return;
    }
    const absl::Status failed =
        !reply.ok() ? reply.status()
        : (*reply)->type == REDIS_REPLY_ERROR
            ? ParseVerdict(*reply).status()
            : absl::UnavailableError("redis: unexpected reply to the limit script");
    for (Done& done : waiting) {
      if (errors != nullptr) errors->Increment();
      std::move(done)(failed);
    }
  };
  std::string resend = text;
  link.Send(text, LoadingScriptIfLost(kAdmitScript, std::move(resend),
                                      ReleasingIfLost(std::move(batch.slots), std::move(answer))));
}

void RedisLimiter::SendAlone(Batch batch) {
  boost::asio::post(own_loop_, [link = own_link_, group = group_, errors = errors_,
                                ttl = absl::ToInt64Microseconds(options_.lease_ttl),
                                batch = std::move(batch)]() mutable {
    SendBatch(*link, std::move(batch), *group, ttl, errors);
  });
}

void RedisLimiter::Admit(std::span<const Charge> charges, std::string_view lease, Done done) {
  if (charges.empty()) {
    std::move(done)(Verdict{});
    return;
  }
  boost::asio::io_context* loop = ThisThreadEventLoop();
  if (loop == nullptr) {  // no loop to gather on: through the limiter's own thread, alone
    Batch batch;
    Gather(batch, charges, lease, std::move(done));
    return SendAlone(std::move(batch));
  }
  // Gathered until the loop has run what this turn of it had queued (the requests whose bytes
  // arrived together), then sent as one command.
  LoopLink& on = LinkOn(*loop);
  Gather(on.batch, charges, lease, std::move(done));
  if (on.batch.waiting.size() >= kMaxBatch) return Flush(on);
  FlushAfterThisTurn(on, *loop);
}

void RedisLimiter::FlushAfterThisTurn(LoopLink& on, boost::asio::io_context& loop) {
  if (on.flush_posted) return;
  on.flush_posted = true;
  boost::asio::post(loop, [on = cached_link.link] {
    on->flush_posted = false;
    Flush(*on);
  });
}

void RedisLimiter::Flush(LoopLink& on) {
  // The slots given back first: the admissions of the same turn may take them.
  for (std::string& release : on.releases.TakeCommands()) {
    on.link->Send(release, RetriedOnReconnect(release, on.errors, ReleaseGiveUp(on.lease_ttl_us)),
                  RedisLink::Pending::kUncapped);
  }
  if (on.batch.waiting.empty()) return;
  SendBatch(*on.link, std::exchange(on.batch, Batch{}), *on.group, on.lease_ttl_us, on.errors);
}

absl::StatusOr<Verdict> RedisLimiter::AdmitNow(std::span<const Charge> charges,
                                               std::string_view lease) {
  if (charges.empty()) return Verdict{};
  absl::Notification ready;
  absl::StatusOr<Verdict> result;
  Batch batch;
  Gather(batch, charges, lease, [&](absl::StatusOr<Verdict> verdict) {
    result = std::move(verdict);
    ready.Notify();
  });
  SendAlone(std::move(batch));
  ready.WaitForNotification();
  return result;
}

void RedisLimiter::AddSlots(SlotReleases& slots, std::span<const Charge> charges,
                            std::string_view lease) const {
  for (const Charge& c : charges) {
    if (c.rule->kind == LimitRule::Kind::kConcurrency) slots.Add(Key('c', c, 0), lease);
  }
}

void RedisLimiter::Release(std::span<const Charge> charges, std::string_view lease) {
  leases_->Drop(lease);
  // While Redis is down a release waits for the next connection (at most
  // RedisLink::kMaxDeferred of them; beyond, the lease expires on its own after lease_ttl).
  boost::asio::io_context* loop = ThisThreadEventLoop();
  if (loop == nullptr) {
    SlotReleases slots;
    AddSlots(slots, charges, lease);
    for (std::string& release : slots.TakeCommands()) {
      RedisLink::Reply retried = RetriedOnReconnect(
          release, errors_, ReleaseGiveUp(absl::ToInt64Microseconds(options_.lease_ttl)));
      Dispatch(std::move(release), std::move(retried), RedisLink::Pending::kUncapped);
    }
    return;
  }
  // Gathered like admissions: the slots a loop's turn gives back, one ZREM a key, sent with the
  // turn's admissions (a request's release had been a command of its own: as many commands for
  // Redis to run as admissions).
  LoopLink& on = LinkOn(*loop);
  AddSlots(on.releases, charges, lease);
  if (on.releases.leases() >= kMaxBatch) return Flush(on);
  FlushAfterThisTurn(on, *loop);
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
