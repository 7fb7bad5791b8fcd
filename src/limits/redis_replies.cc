#include "limits/redis_replies.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "common/clock.h"
#include "common/strings.h"
#include "limits/resp_command.h"

namespace pillar::limits {
namespace {

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

}  // namespace

[[nodiscard]] absl::StatusOr<Verdict> ParseVerdict(const redisReply* reply) {
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

RedisLink::Reply CountingErrors(monitor::Counter* errors, bool count_outage) {
  return [errors, count_outage](RedisLink&, absl::StatusOr<const redisReply*> answer) {
    if (errors == nullptr) return;
    if (answer.ok() ? (*answer)->type == REDIS_REPLY_ERROR : count_outage) errors->Increment();
  };
}

RedisLink::Reply ReleasingIfLost(SlotReleases slots, RedisLink::Reply reply) {
  if (slots.empty()) return reply;
  return [slots = std::move(slots), reply = std::move(reply)](
             RedisLink& link, absl::StatusOr<const redisReply*> answer) mutable {
    if (!answer.ok() && link.may_have_run()) {
      for (std::string& release : slots.TakeCommands()) link.SendOnReconnect(std::move(release));
    }
    std::move(reply)(link, std::move(answer));
  };
}

RedisLink::Reply RetriedOnReconnect(std::string release, monitor::Counter* errors,
                                    std::chrono::steady_clock::time_point give_up, int refusals) {
  return [release = std::move(release), errors, give_up, refusals](
             RedisLink& link, absl::StatusOr<const redisReply*> answer) mutable {
    if (!answer.ok()) return link.SendOnReconnect(std::move(release));
    if ((*answer)->type != REDIS_REPLY_ERROR) return;
    if (refusals == 0 && errors != nullptr) errors->Increment();
    const auto pause = std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(50 << std::min(refusals, 5)), std::chrono::seconds(1));
    if (std::chrono::steady_clock::now() + pause >= give_up) return;
    std::string again = release;
    link.SendAfter(pause, std::move(again),
                   RetriedOnReconnect(std::move(release), errors, give_up, refusals + 1),
                   RedisLink::Pending::kUncapped);
  };
}

std::chrono::steady_clock::time_point ReleaseGiveUp(int64_t lease_ttl_us) {
  return std::chrono::steady_clock::now() + std::chrono::microseconds(lease_ttl_us);
}

}  // namespace pillar::limits
