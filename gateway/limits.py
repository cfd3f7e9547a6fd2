"""Rate limits and budget holds, shared by every gateway process through atomic Redis scripts.

One round trip admits a request (``ADMIT``): it checks requests/min and tokens/min for the key and
the tenant (sliding window over two fixed minute windows) and, when the tenant has a hard budget
cap, holds the request's worst-case cost against what is left. Nothing is counted unless
everything passes, so a rejected request leaves no trace. In the same step the admitted request is
written to its worker's in-flight ledger (``gateway.ledger``), so a hold never exists without a
record saying whose it is. One round trip settles it (``SETTLE``): the ledger entry is removed, the
hold released, the actual cost added to the period's spend, and the token window corrected from the
estimate to the real count. When the entry is already gone, the reaper has settled the request for
a worker it took for dead, and ``SETTLE`` books nothing (a request settles once).

Amounts are integers: tokens, and cost in nano-dollars (a price of $X per million tokens is X*1000
nano-dollars per token), so Lua's doubles stay exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.redisfast import FastRedis
from snapshot.contract import budget_hash_key

# Reasons, in the order the ADMIT script checks them; the index is what the script returns.
REASONS = ("ok", "key_requests", "key_tokens", "tenant_requests", "tenant_tokens", "budget_exceeded")

ADMIT_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local win = math.floor(now / 60)
local elapsed = now - win * 60
local frac = elapsed / 60
local tokens = tonumber(ARGV[5])
local hold = tonumber(ARGV[6])
local cap = tonumber(ARGV[7])
local used = {}
local remaining = {}
for i = 1, 4 do
  local limit = tonumber(ARGV[i])
  if limit > 0 then
    local amount = 1
    if i % 2 == 0 then amount = tokens end
    local cur = tonumber(redis.call('GET', KEYS[i] .. ':' .. win) or '0')
    local prev = tonumber(redis.call('GET', KEYS[i] .. ':' .. (win - 1)) or '0')
    local u = cur + prev * (1 - frac)
    if u + amount > limit then
      local retry
      if cur + amount > limit then
        local need = 0
        if cur > 0 then need = 1 - (limit - amount) / cur end
        if need < 0 then need = 0 end
        if need > 1 then need = 1 end
        retry = (60 - elapsed) + 60 * need
      else
        local f2 = 1 - (limit - cur - amount) / prev
        retry = (f2 - frac) * 60
      end
      if retry < 0.05 then retry = 0.05 end
      return {i, math.ceil(retry * 1000), limit, 0, 0}
    end
    remaining[i] = math.floor(limit - u - amount)
  end
end
local spent = 0
local held = 0
if cap >= 0 then
  redis.call('HSETNX', KEYS[5], 'spent', ARGV[8])
  spent = tonumber(redis.call('HGET', KEYS[5], 'spent') or '0')
  held = tonumber(redis.call('HGET', KEYS[5], 'held') or '0')
  if spent + held + hold > cap then
    -- When refusals began this period: the console shows it and notifies (once per period).
    redis.call('HSETNX', KEYS[5], 'refused_at', t[1])
    redis.call('EXPIRE', KEYS[5], tonumber(ARGV[9]))
    return {5, 0, cap, spent, held}
  end
  redis.call('HINCRBY', KEYS[5], 'held', hold)
  redis.call('EXPIRE', KEYS[5], tonumber(ARGV[9]))
end
if ARGV[11] ~= '' then
  redis.call('HSET', KEYS[6], 'r:' .. ARGV[10], ARGV[11])
  redis.call('SADD', KEYS[7], ARGV[12])
end
for i = 1, 4 do
  if tonumber(ARGV[i]) > 0 then
    local amount = 1
    if i % 2 == 0 then amount = tokens end
    local k = KEYS[i] .. ':' .. win
    redis.call('INCRBY', k, amount)
    redis.call('EXPIRE', k, 130)
  end
end
local rr = -1
local rt = -1
if remaining[1] then rr = remaining[1] end
if remaining[3] and (rr < 0 or remaining[3] < rr) then rr = remaining[3] end
if remaining[2] then rt = remaining[2] end
if remaining[4] and (rt < 0 or remaining[4] < rt) then rt = remaining[4] end
return {0, 0, math.ceil((60 - elapsed) * 1000), rr, rt}
"""

SETTLE_LUA = """
if ARGV[9] ~= '' then
  local owned = redis.call('HDEL', KEYS[4], 'r:' .. ARGV[9])
  redis.call('HDEL', KEYS[4], 'n:' .. ARGV[9])
  if owned == 0 then return {-1, -1} end
end
local t = redis.call('TIME')
local win = math.floor((tonumber(t[1]) + tonumber(t[2]) / 1000000) / 60)
local delta = tonumber(ARGV[1])
for i = 1, 2 do
  if ARGV[i + 1] == '1' and delta ~= 0 then
    local k = KEYS[i] .. ':' .. win
    local v = redis.call('INCRBY', k, delta)
    if v < 0 then redis.call('SET', k, 0) end
    redis.call('EXPIRE', k, 130)
  end
end
if ARGV[4] == '1' then
  redis.call('HSETNX', KEYS[3], 'spent', ARGV[7])
  -- 0 - x, not -x: Lua writes -0 as "-0", which HINCRBY refuses (a budget with no cap holds 0).
  local held = redis.call('HINCRBY', KEYS[3], 'held', 0 - tonumber(ARGV[5]))
  if held < 0 then redis.call('HSET', KEYS[3], 'held', 0) end
  local before = tonumber(redis.call('HGET', KEYS[3], 'spent'))
  local after = redis.call('HINCRBY', KEYS[3], 'spent', tonumber(ARGV[6]))
  redis.call('EXPIRE', KEYS[3], tonumber(ARGV[8]))
  return {before, after}
end
return {0, 0}
"""

# Delivered-token progress of this worker's streams: written only while the request's entry exists,
# so a journal write racing a settle cannot leave a stale entry behind.
JOURNAL_LUA = """
for i = 1, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[1], 'r:' .. ARGV[i]) == 1 then
    redis.call('HSET', KEYS[1], 'n:' .. ARGV[i], ARGV[i + 1])
  end
end
return 0
"""

# Settles a dead worker's entries (KEYS: its lease, its ledger, the workers set, then one budget key
# per entry; ARGV: the worker, then per entry event id, hold, cost, seed spend, budget ttl, budget
# active). Does nothing while the lease exists; an entry already gone was settled by someone else.
REAP_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
local n = 0
for i = 4, #KEYS do
  local j = 2 + (i - 4) * 6
  local eid = ARGV[j]
  if redis.call('HDEL', KEYS[2], 'r:' .. eid) == 1 then
    redis.call('HDEL', KEYS[2], 'n:' .. eid)
    n = n + 1
    if ARGV[j + 5] == '1' then
      local b = KEYS[i]
      redis.call('HSETNX', b, 'spent', ARGV[j + 3])
      local held = redis.call('HINCRBY', b, 'held', 0 - tonumber(ARGV[j + 1]))
      if held < 0 then redis.call('HSET', b, 'held', 0) end
      redis.call('HINCRBY', b, 'spent', tonumber(ARGV[j + 2]))
      redis.call('EXPIRE', b, tonumber(ARGV[j + 4]))
    end
  end
end
if redis.call('HLEN', KEYS[2]) == 0 then redis.call('SREM', KEYS[3], ARGV[1]) end
return n
"""


@dataclass(slots=True)
class Admission:
    """What ADMIT answered: ``reason`` 0 means admitted."""

    reason: int
    retry_ms: int
    limit_or_reset_ms: int
    remaining_requests: int
    remaining_tokens: int

    @property
    def admitted(self) -> bool:
        return self.reason == 0

    @property
    def budget_spent_nanos(self) -> int:
        """On a budget refusal: the period's spend when it was refused."""
        return self.remaining_requests

    @property
    def budget_held_nanos(self) -> int:
        """On a budget refusal: what requests in flight held when it was refused."""
        return self.remaining_tokens


class Limiter:
    """Thin wrapper around the two scripts; one instance per gateway process."""

    def __init__(self, redis: FastRedis, prefix: str, worker_id: str = "") -> None:
        self.redis = redis
        self.prefix = prefix
        self.worker_id = worker_id
        self._admit = redis.script(ADMIT_LUA)
        self._settle = redis.script(SETTLE_LUA)

    def budget_key(self, tenant_id: int, period_key: str) -> str:
        return budget_hash_key(self.prefix, tenant_id, period_key)

    def ledger_key(self, worker_id: str) -> str:
        """A worker's in-flight ledger (hash): ``r:<event id>`` the entry, ``n:<event id>`` progress."""
        return f"{self.prefix}inflight:{worker_id}"

    def lease_key(self, worker_id: str) -> str:
        """Exists while the worker is alive (it renews the TTL); gone means its entries may be reaped."""
        return f"{self.prefix}gwlease:{worker_id}"

    @property
    def workers_key(self) -> str:
        """The set of workers that may have ledger entries."""
        return f"{self.prefix}gwworkers"

    async def admit(
        self,
        *,
        key_id: int,
        tenant_id: int,
        key_rpm: int,
        key_tpm: int,
        tenant_rpm: int,
        tenant_tpm: int,
        tokens: int,
        hold_nanos: int,
        cap_nanos: int,
        seed_spent_nanos: int,
        period_key: str,
        budget_ttl_s: int,
        event_id: str = "",
        record: bytes = b"",
    ) -> Admission:
        """Check all limits and the budget, and count/hold only if every one passes; an admitted
        request's ``record`` (when given) goes into this worker's ledger in the same step."""
        p = self.prefix
        keys = [
            f"{p}rl:k:{key_id}:r",
            f"{p}rl:k:{key_id}:t",
            f"{p}rl:t:{tenant_id}:r",
            f"{p}rl:t:{tenant_id}:t",
            self.budget_key(tenant_id, period_key),
            self.ledger_key(self.worker_id),
            self.workers_key,
        ]
        args = [
            key_rpm,
            key_tpm,
            tenant_rpm,
            tenant_tpm,
            tokens,
            hold_nanos,
            cap_nanos,
            seed_spent_nanos,
            budget_ttl_s,
            event_id,
            record,
            self.worker_id,
        ]
        res = await self.redis.evalsha(self._admit, keys, args)
        return Admission(*(int(x) for x in res))

    async def settle(
        self,
        *,
        key_id: int,
        tenant_id: int,
        token_delta: int,
        key_tpm_active: bool,
        tenant_tpm_active: bool,
        budget_active: bool,
        hold_nanos: int,
        cost_nanos: int,
        seed_spent_nanos: int,
        period_key: str,
        budget_ttl_s: int,
        event_id: str = "",
    ) -> tuple[int, int]:
        """Release the hold, add the actual cost, correct the token window; returns spend before/after,
        or (-1, -1) when ``event_id``'s ledger entry was gone (the reaper settled it)."""
        p = self.prefix
        keys = [
            f"{p}rl:k:{key_id}:t",
            f"{p}rl:t:{tenant_id}:t",
            self.budget_key(tenant_id, period_key),
            self.ledger_key(self.worker_id),
        ]
        args = [
            token_delta,
            "1" if key_tpm_active else "0",
            "1" if tenant_tpm_active else "0",
            "1" if budget_active else "0",
            hold_nanos,
            cost_nanos,
            seed_spent_nanos,
            budget_ttl_s,
            event_id,
        ]
        before, after = await self.redis.evalsha(self._settle, keys, args)
        return int(before), int(after)
