#include "limits/redis_scripts.h"

namespace pillar::limits {

// The admissions of one turn of a loop, in one call: Redis runs a script's fixed cost and each
// key's reads and writes once per batch instead of once per request (a third of the CPU per
// admission at eight a batch, measured with INFO commandstats).
// ARGV: the number of specs; per spec (the charges of one request; requests with the same
// charges share one): its number of keys, then per key kind, cost, a, b, report; then the lease
// TTL (us); then per admission: its spec (1-based) and its lease. KEYS: the specs' keys in order.
//   r (rate):        a = emission interval (us per unit), b = burst (units)
//   c (concurrency): a = maximum in flight
//   q (quota):       a = quota, b = end of the period (Unix s); the key names the period
//   report:          1 for a charge the admission's reply describes (ReportsRemaining)
// The admissions are decided in order, each against what those before it took, exactly as if
// each had been its own call. Returns, per admission, {1} when every charge fits (and takes them
// all), or {1, index, limit, remaining, reset_ms} for the reported charge with the fewest units
// left after it; else {0, index, limit, remaining, reset_ms, retry_after_ms, renews_at_s} for the
// first that does not fit (and takes none). Each key is read at most once (a concurrency set
// twice, when it looks full and is purged of expired leases) and written once, at the end.
// Numbers written back are formatted explicitly: Lua would print a microsecond timestamp with 14
// significant digits and lose precision.
const char* const kAdmitScript = R"lua(
local t = redis.call('TIME')
local now_s = tonumber(t[1])
local now_us = now_s * 1000000 + tonumber(t[2])
local specs = {}
local k, o = 0, 2
for s = 1, tonumber(ARGV[1]) do
  local nkeys = tonumber(ARGV[o])
  o = o + 1
  local charges = {}
  for i = 1, nkeys do
    charges[i] = {key = KEYS[k + i], kind = ARGV[o], cost = tonumber(ARGV[o + 1]),
                  a = tonumber(ARGV[o + 2]), b = tonumber(ARGV[o + 3]), report = ARGV[o + 4] == '1'}
    o = o + 5
  end
  k = k + nkeys
  specs[s] = charges
end
local lease_ttl_us = tonumber(ARGV[o])
local lease_score = string.format('%.0f', now_us + lease_ttl_us)
o = o + 1
local state = {}  -- per key: what the batch read, and will write once at the end
local function load(c)
  local e = state[c.key]
  if e ~= nil then return e end
  if c.kind == 'c' then
    e = {count = redis.call('ZCARD', c.key), purged = false, adds = {}}
  else
    local v = tonumber(redis.call('GET', c.key) or 0)
    e = {v = v, before = v, dirty = false}
  end
  state[c.key] = e
  return e
end
local results = {}
local new = {}
local n = 0
while o <= #ARGV do
  local charges, lease = specs[tonumber(ARGV[o])], ARGV[o + 1]
  o = o + 2
  n = n + 1
  local refused = nil
  for i = 1, #charges do
    local c = charges[i]
    local e = load(c)
    local a, b, cost = c.a, c.b, c.cost
    if c.kind == 'r' then
      local tat = e.v
      if tat < now_us then tat = now_us end
      local nt = tat + cost * a
      local tolerance = a * b
      if nt - now_us > tolerance then
        local retry = -1
        if cost <= b then retry = math.ceil((nt - now_us - tolerance) / 1000) end
        local remaining = math.floor((tolerance - (tat - now_us)) / a)
        if remaining < 0 then remaining = 0 end
        refused = {0, i, b, remaining, math.ceil((tat - now_us) / 1000), retry, 0}
        break
      end
      new[i] = nt
    elseif c.kind == 'c' then
      if e.count + 1 > a and not e.purged then
        redis.call('ZREMRANGEBYSCORE', c.key, '-inf', string.format('%.0f', now_us))
        e.count = redis.call('ZCARD', c.key) + #e.adds / 2
        e.purged = true
      end
      if e.count + 1 > a then
        refused = {0, i, a, 0, 1000, 1000, 0}
        break
      end
    else
      new[i] = e.v
      if e.v + cost > a then
        local retry = (b - now_s) * 1000
        if cost > a then retry = -1 end
        local remaining = a - e.v
        if remaining < 0 then remaining = 0 end
        refused = {0, i, a, remaining, (b - now_s) * 1000, retry, b}
        break
      end
    end
  end
  if refused ~= nil then
    results[n] = refused
  else
    local best = nil
    for i = 1, #charges do
      local c = charges[i]
      local e = state[c.key]
      local limit, remaining, reset_ms = nil, 0, 0
      if c.kind == 'r' then
        e.v = new[i]
        e.dirty = true
        if c.report then
          limit, remaining, reset_ms = c.b, math.floor((c.a * c.b - (new[i] - now_us)) / c.a),
                                       math.ceil((new[i] - now_us) / 1000)
        end
      elseif c.kind == 'c' then
        e.count = e.count + 1
        e.adds[#e.adds + 1] = lease_score
        e.adds[#e.adds + 1] = lease
      else
        e.v = e.v + c.cost
        e.dirty = true
        e.ends = c.b
        if c.report then
          limit, remaining, reset_ms = c.a, c.a - new[i] - c.cost, (c.b - now_s) * 1000
        end
      end
      if limit ~= nil then
        if remaining < 0 then remaining = 0 end
        if remaining > limit then remaining = limit end
        if best == nil or remaining < best[3] then best = {i - 1, limit, remaining, reset_ms} end
      end
    end
    if best ~= nil then results[n] = {1, best[1], best[2], best[3], best[4]}
    else results[n] = {1} end
  end
end
for key, e in pairs(state) do
  if e.adds ~= nil then
    if #e.adds > 0 then
      redis.call('ZADD', key, unpack(e.adds))
      redis.call('PEXPIRE', key, math.ceil(lease_ttl_us / 1000) + 1000)
    end
  elseif e.dirty then
    if e.ends == nil then
      redis.call('SET', key, string.format('%.3f', e.v), 'PX', math.ceil((e.v - now_us) / 1000) + 1000)
    elseif e.v ~= e.before then
      redis.call('INCRBY', key, e.v - e.before)
      if e.before == 0 then redis.call('EXPIREAT', key, e.ends + 86400) end
    end
  end
end
return results
)lua";

// A settlement (Limiter::Settle), never refused. ARGV per key: kind, units (negative: a
// refund), a (rate: emission interval, us per unit; quota: end of the period, Unix s). A rate's
// arrival time moves by the units, not back past now; a quota's usage, not below zero.
const char* const kSettleScript = R"lua(
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

// Renewals (LeaseKeeper::Due): the leases still held get a new expiry, now + the lease TTL, and
// their slot keys live that long too. Only members still there are touched (ZADD XX): a lease
// released meanwhile, or one Redis already dropped, is not taken again. ARGV: the lease TTL (us);
// then per key of KEYS: its number of leases, then the leases.
const char* const kRenewScript = R"lua(
local t = redis.call('TIME')
local ttl_us = tonumber(ARGV[1])
local score = string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]) + ttl_us)
local o = 2
for k = 1, #KEYS do
  local n = tonumber(ARGV[o])
  o = o + 1
  local members = {}
  for i = 1, n do
    members[#members + 1] = score
    members[#members + 1] = ARGV[o]
    o = o + 1
  end
  if redis.call('ZADD', KEYS[k], 'XX', 'CH', unpack(members)) > 0 then
    redis.call('PEXPIRE', KEYS[k], math.ceil(ttl_us / 1000) + 1000)
  end
end
return 1
)lua";

}  // namespace pillar::limits
