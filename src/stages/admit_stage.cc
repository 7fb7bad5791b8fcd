#include "stages/admit_stage.h"

#include "common/clock.h"
#include "common/json_writer.h"
#include "common/strings.h"
#include "pipeline/chain.h"
#include "policy/glob.h"
#include "stages/exchange_event.h"

namespace pillar::stages {

using limits::Charge;
using limits::Limiter;
using limits::ReportsRemaining;
using limits::Verdict;
namespace {

using policy::LimitRule;

bool Contains(const std::vector<std::string>& values, std::string_view v) {
  for (const std::string& x : values) {
    if (x == v) return true;
  }
  return false;
}

int64_t Elements(const pipeline::Exchange& ex) {
  if (!ex.infer_request.has_value()) return 0;
  int64_t total = 0;
  for (const protocol::Tensor& t : ex.infer_request->inputs) total += t.ElementCount();
  return total;
}

int64_t CeilSeconds(int64_t ms) { return std::max<int64_t>(0, (ms + 999) / 1000); }

std::string_view UnitName(const LimitRule& rule) {
  switch (rule.unit) {
    case LimitRule::Unit::kElements:
      return "elements";
    case LimitRule::Unit::kTokens:
      return "tokens";
    default:
      return "requests";
  }
}

// The tokens the call used, as its answer's usage says (or as pillar estimated them for a stream
// cut short); none when no model answered it. An answer withheld afterwards (the guard blocked
// it) is still charged: the model did the work, and a caller must not be able to have it done
// for free by asking for what will be withheld.
int64_t UsedTokens(const pipeline::Exchange& ex) {
  return ex.infer_result.usage.prompt_tokens + ex.infer_result.usage.completion_tokens;
}

// OpenAI's names for what is left of a token limit; the reset as a duration ("12s").
void AddTokenHeaders(const Verdict& v, std::vector<std::pair<std::string, std::string>>& h) {
  h.emplace_back("x-ratelimit-limit-tokens", StrCat(v.limit));
  h.emplace_back("x-ratelimit-remaining-tokens", StrCat(v.remaining));
  h.emplace_back("x-ratelimit-reset-tokens", StrCat(CeilSeconds(v.reset_ms), "s"));
}

}  // namespace

AdmitStage::AdmitStage(Limiter& limiter, Limiter* fallback, audit::AuditSink& audit,
                       monitor::MetricsRegistry* metrics, const Clock& clock)
    : limiter_(limiter), fallback_(fallback), audit_(audit), clock_(clock) {
  if (metrics != nullptr) {
    auto& family = metrics->AddCounter(
        "pillar_limiter_unavailable_total",
        "Requests whose limits the limit store could not decide, by what happened to them.",
        {"outcome"});
    unavailable_ = &family.Get({"refused"});
    fell_back_ = &family.Get({"local_fallback"});
  }
}

void AdmitStage::CollectCharges(const pipeline::Exchange& ex, Charges& out) {
  out.clear();
  if (ex.policy == nullptr || ex.principal == nullptr) return;
  int64_t elements = -1;  // computed once, when a limit counts elements
  // An asynchronous job is charged its rates and quotas when it is submitted, and holds its
  // concurrency places while it runs (not while it waits in the job queue).
  const bool submitting =
      ex.respond_async && !ex.job_run && ex.operation == pipeline::Operation::kInfer;
  for (const LimitRule& rule : ex.policy->limits()) {
    const bool concurrency = rule.kind == LimitRule::Kind::kConcurrency;
    if (ex.job_run ? !concurrency : (concurrency && submitting)) continue;
    if (!Contains(rule.actions, ex.action) && !Contains(rule.actions, "*")) continue;
    bool resource_matches = false;
    for (const std::string& pattern : rule.resources) {
      if (policy::GlobMatch(pattern, ex.resource)) {
        resource_matches = true;
        break;
      }
    }
    if (!resource_matches) continue;
    if (!rule.tenants.empty() && !Contains(rule.tenants, ex.principal->tenant)) continue;
    Charge charge;
    charge.rule = &rule;
    switch (rule.per) {
      case LimitRule::Per::kKey:
        charge.subject = ex.principal->key_id.empty() ? std::string_view(ex.principal->id)
                                                      : std::string_view(ex.principal->key_id);
        break;
      case LimitRule::Per::kTenant:
        // A principal without a tenant (an admin key, a certificate or token that names none)
        // is counted on its own, by its id. Sharing the empty tenant's counter would let one
        // such principal exhaust the limit for all of them; skipping the limit would let any
        // credential without a tenant escape it.
        if (ex.principal->tenant.empty()) {
          charge.subject = ex.principal->id;
          charge.by_principal = true;
        } else {
          charge.subject = ex.principal->tenant;
        }
        break;
      case LimitRule::Per::kModel:
        charge.subject =
            ex.model != nullptr ? std::string_view(ex.model->name) : std::string_view(ex.resource);
        break;
    }
    if (rule.kind != LimitRule::Kind::kConcurrency && rule.unit == LimitRule::Unit::kElements) {
      if (elements < 0) elements = Elements(ex);
      charge.cost = elements;
      if (charge.cost == 0) continue;  // nothing to count (a metadata request)
    }
    if (rule.kind != LimitRule::Kind::kConcurrency && rule.unit == LimitRule::Unit::kTokens) {
      if (!pipeline::GeneratesText(ex.operation)) continue;  // not a language model's call
      // A call whose prompt is estimated at nothing and whose length has no bound still costs
      // what it makes: it reserves one token, so that a spent limit refuses it and its usage is
      // settled afterwards (review helper-125: an empty prompt was never charged, and went on
      // past a spent quota).
      charge.cost = std::max<int64_t>(1, ex.reserved_tokens);
    }
    out.push_back(charge);
  }
}

pipeline::StageResult AdmitStage::OnRequest(pipeline::Exchange& ex) {
  Charges charges;
  CollectCharges(ex, charges);
  if (charges.empty()) return pipeline::StageResult::kContinue;
  if (limiter_.synchronous()) {
    absl::StatusOr<Verdict> verdict = limiter_.AdmitNow(charges, ex.request_id);
    return Decide(ex, charges, std::move(verdict)) ? pipeline::StageResult::kContinue
                                                   : pipeline::StageResult::kStop;
  }
  // Nothing below may touch `ex` after Admit(): the callback may already have resumed it.
  limiter_.Admit(charges, ex.request_id, [this, &ex](absl::StatusOr<Verdict> verdict) mutable {
    ex.post([this, &ex, verdict = std::move(verdict)]() mutable {
      Charges again;  // the same policy snapshot gives the same charges
      CollectCharges(ex, again);
      const bool admitted = Decide(ex, again, std::move(verdict));
      ex.chain().Resume(ex,
                        admitted ? pipeline::StageResult::kContinue : pipeline::StageResult::kStop);
    });
  });
  return pipeline::StageResult::kSuspend;
}

bool AdmitStage::Decide(pipeline::Exchange& ex, const Charges& charges,
                        absl::StatusOr<Verdict> verdict) {
  Limiter* admitted_by = &limiter_;
  if (!verdict.ok()) {
    if (fallback_ == nullptr) {
      if (unavailable_ != nullptr) unavailable_->Increment();
      ex.Fail(runtime::UnavailableWithRetry("rate limits cannot be checked right now", 1));
      ex.error = StrCat("limit store: ", verdict.status().message());
      Record(ex, false);
      return false;
    }
    if (fell_back_ != nullptr) fell_back_->Increment();
    admitted_by = fallback_;
    verdict = fallback_->AdmitNow(charges, ex.request_id);
    if (!verdict.ok()) {
      ex.Fail(verdict.status());
      return false;
    }
  }
  if (!verdict->allowed) {
    bool by_principal = false;
    if (verdict->charge_index >= 0 && size_t(verdict->charge_index) < charges.size()) {
      const Charge& refused = charges[size_t(verdict->charge_index)];
      verdict->rule = refused.rule;
      verdict->subject = std::string(refused.subject);
      by_principal = refused.by_principal;
    }
    Refuse(ex, *verdict, by_principal);
    Record(ex, false);
    return false;
  }
  Record(ex, true);
  if (verdict->charge_index >= 0) AddTokenHeaders(*verdict, ex.response.headers);
  HoldSlots(ex, charges, *admitted_by);
  return true;
}

void AdmitStage::HoldSlots(pipeline::Exchange& ex, const Charges& charges, Limiter& by) {
  bool holds = false;
  for (const Charge& c : charges) {
    holds = holds || c.rule->kind == LimitRule::Kind::kConcurrency || ReportsRemaining(c);
  }
  if (!holds) return;
  Limiter* limiter = &by;
  const int64_t admitted_s = clock_.UnixMicros() / 1'000'000;
  ex.release = [limiter, admitted_s](pipeline::Exchange& done) {
    Charges again;  // the same policy snapshot and call give the same charges
    CollectCharges(done, again);
    limiter->Release(again, done.request_id);
    // What the call reserved in tokens becomes what it used.
    const int64_t used = UsedTokens(done);
    Charges settle;
    for (Charge c : again) {
      if (!ReportsRemaining(c) || c.cost == used) continue;
      c.cost = used - c.cost;
      settle.push_back(c);
    }
    if (!settle.empty()) limiter->Settle(settle, admitted_s);
  };
}

void AdmitStage::OnResponse(pipeline::Exchange& ex) {
  if (ex.release) {
    auto release = std::move(ex.release);
    ex.release = nullptr;
    std::move(release)(ex);
  }
}

void AdmitStage::Refuse(pipeline::Exchange& ex, const Verdict& v, bool by_principal) {
  const LimitRule* rule = v.rule;
  std::string message;
  if (rule == nullptr) {
    message = "limit exceeded";
  } else {
    const std::string who = by_principal
                                ? StrCat("principal '", v.subject, "' (it has no tenant)")
                                : StrCat(policy::LimitPerName(rule->per), " '", v.subject, "'");
    switch (rule->kind) {
      case LimitRule::Kind::kRate:
        message = v.retry_after_ms < 0
                      ? StrCat("request exceeds rate limit '", rule->name, "' for ", who,
                               " on its own: its size is above the burst of ", v.limit, " ",
                               UnitName(*rule))
                      : StrCat("rate limit '", rule->name, "' for ", who, " exceeded (",
                               UnitName(*rule), ", burst ", v.limit, ")");
        break;
      case LimitRule::Kind::kConcurrency:
        message = StrCat("concurrency limit '", rule->name, "' for ", who, " reached: ", v.limit,
                         " requests in flight");
        break;
      case LimitRule::Kind::kQuota:
        message = StrCat("quota '", rule->name, "' for ", who, " exhausted: ", v.limit, " ",
                         UnitName(*rule), " per ",
                         rule->period == LimitRule::Period::kDay ? "day" : "month", "; renews at ",
                         FormatUtc(v.renews_at_s));
        break;
    }
  }
  ex.Fail(absl::ResourceExhaustedError(message));
  // A job's run waits for its place (the job queue tries again soon) rather than failing.
  ex.held_back = ex.job_run && rule != nullptr && rule->kind == LimitRule::Kind::kConcurrency;
  // The body names the limit in fields a client can act on, not only in prose (the OpenAI-
  // compatible routes keep OpenAI's error shape, which their clients parse).
  if (rule != nullptr && !pipeline::OpenAiShaped(ex.operation)) {
    JsonWriter w(256);
    w.BeginObject();
    w.Key("error");
    w.String(message);
    w.Key("limit");
    w.String(rule->name);
    w.Key("per");
    w.String(policy::LimitPerName(rule->per));
    if (rule->kind == LimitRule::Kind::kQuota) {
      w.Key("renews_at");
      w.String(FormatUtc(v.renews_at_s));
    }
    w.EndObject();
    ex.response.body = std::move(w).Take();
  }
  auto& h = ex.response.headers;
  if (v.retry_after_ms >= 0)
    h.emplace_back("Retry-After", StrCat(std::max<int64_t>(1, CeilSeconds(v.retry_after_ms))));
  h.emplace_back("RateLimit-Limit", StrCat(v.limit));
  h.emplace_back("RateLimit-Remaining", StrCat(v.remaining));
  h.emplace_back("RateLimit-Reset", StrCat(CeilSeconds(v.reset_ms)));
  if (rule != nullptr && rule->unit == LimitRule::Unit::kTokens) AddTokenHeaders(v, h);
}

void AdmitStage::Record(pipeline::Exchange& ex, bool allowed) {
  audit_.Record(ExchangeEvent(
      ex, audit::EventKind::kLimit, allowed,
      [&] {
        if (allowed) return std::string("within limits");
        return ex.error.empty() ? std::string("refused") : ex.error;
      },
      clock_));
}

}  // namespace pillar::stages
