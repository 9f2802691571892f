-- _take_claim.lua: a fragment, not a script. Included (--#include _take_claim) by
-- idem_claim.lua and read_stream.lua (which claims the jobs of idempotent tasks as it reads
-- them, so a claim costs no round trip of its own).
-- take_claim(key, other, legacy, token, lease_ms, scope, done_prefix, mirror, expect)
-- claims an idempotency key before a side effect: SET of 'c:<token>' with the lease as its
-- expiry, only when the key is absent and not done. A claim whose owner stopped renewing
-- (it died) expires with its lease and can be taken over.
-- A claim made inside a worker's run is held by that worker ('c:w<hold>.<quiet>.<gap>.
-- <hex>.<consumer>', see lockgate.api.idempotency.Claim): its expiry is its lease plus <hold>
-- ms, so that it outlives an outage longer than its lease (Redis restarted from its AOF,
-- hung) while its holder lives. Once only the hold is left (the lease lapsed), it is busy
-- to everyone but a caller that judged its holder dead (judge_owner.lua) and names, in
-- expect, the value it judged: the claim is taken over only when it is still exactly that.
-- Done is, in this order: a 'd:<token>' value under the key; the key's bucketed marker
-- (see _done_marker.lua; done_prefix is the buckets' prefix); the same two under other
-- (nil, or the claim's 0.2/0.3 name, 'job:<task>:<id>' or 'step:<task>:<id>:<step>', which
-- two claims can share: read, and written only by mirror); a done marker under the 0.1
-- name (legacy, or nil). Under other and legacy a marker tagged 'd:<token>:t:<scope>'
-- (written with legacy_markers; scope names the claim unambiguously: the task for a job
-- claim, the step's own name for a step) counts only for that scope; an untagged one
-- (written by 0.1, 0.2 or 0.3) for every claim of that name: the ambiguity that remains
-- until those markers expire. A live claim under any of the names is busy.
-- With mirror = '1' (App(legacy_markers=True)) the claim is also SET under other and the
-- 0.1 name where they are absent, so older workers of a rolling deploy see it is running.
-- Returns: {1, 0} claimed; {0, 0} already done; {-1, ms left on the holder's lease} busy;
-- {-2, 0, value} a worker's claim whose lease lapsed: judge its holder (expect nil: the
-- read's claims, busy instead).
--#include _done_marker
-- A tag is matched as the value's end, not as what follows its first ':t:': a token
-- may hold ':t:' itself (a read's token ends with the job's ref, a sorted job's id).
local function held_claim(key, legacy, scope, expect)
  local current = redis.call('GET', key)
  if not current then return nil end
  if string.sub(current, 1, 2) == 'd:' then
    local tagged = legacy and string.find(current, ':t:', 3, true)
    if tagged and string.sub(current, -(#scope + 3)) ~= ':t:' .. scope then return nil end
    return {0, 0}
  end
  local left = math.max(0, redis.call('PTTL', key))
  local hold = tonumber(string.match(current, '^c:w(%d+)%.%d+%.%d+%.%x+%.'))
  if not hold then return {-1, left} end
  if left > hold then return {-1, left - hold} end
  if expect == nil then return {-1, 0} end
  if current == expect then return nil end  -- its holder was judged dead: take it over
  return {-2, 0, current}
end

local function take_claim(key, other, legacy, token, lease_ms, scope, done_prefix, mirror, expect)
  local answer = held_claim(key, false, scope, expect)
  if answer then return answer end
  if marker_done(done_prefix, key) then return {0, 0} end
  if other then
    answer = held_claim(other, true, scope, expect)
    if answer then return answer end
    if marker_done(done_prefix, other) then return {0, 0} end
  end
  if legacy then
    answer = held_claim(legacy, true, scope, expect)
    if answer then return answer end
  end
  redis.call('SET', key, 'c:' .. token, 'PX', lease_ms)
  if mirror == '1' then
    for _, name in ipairs({other or false, legacy or false}) do
      if name and expect and expect ~= '' and redis.call('GET', name) == expect then
        redis.call('SET', name, 'c:' .. token, 'PX', lease_ms)  -- the judged holder's mirror
      elseif name then
        redis.call('SET', name, 'c:' .. token, 'PX', lease_ms, 'NX')
      end
    end
  end
  return {1, 0}
end
