-- _take_claim.lua: a fragment, not a script. Included (--#include _take_claim) by
-- idem_claim.lua and read_stream.lua (which claims the jobs of idempotent tasks as it reads
-- them, so a claim costs no round trip of its own).
-- take_claim(key, legacy, token, lease_ms, scope) claims an idempotency key before a side
-- effect: SET of 'c:<token>' with the lease as its expiry, only when the key is absent; the
-- same under the 0.1 name (legacy, or nil) when that is absent (a 0.1 worker of a rolling
-- deploy then sees the job is being run). A claim whose owner stopped renewing (it died)
-- expires with its lease and can be taken over; a done marker ('d:<token>') stays for its
-- own, long TTL. Under the 0.1 name a marker written by this release is tagged
-- 'd:<token>:t:<task>' and counts only for that task (scope); an untagged one (written by
-- 0.1) counts for every task.
-- Returns: {1, 0} claimed; {0, 0} already done; {-1, ms left on the holder's lease} busy.
local function held_claim(key, legacy, scope)
  local current = redis.call('GET', key)
  if not current then return nil end
  if string.sub(current, 1, 2) == 'd:' then
    local tag = legacy and string.match(current, ':t:(.*)$')
    if tag and tag ~= scope then return nil end
    return {0, 0}
  end
  return {-1, math.max(0, redis.call('PTTL', key))}
end

local function take_claim(key, legacy, token, lease_ms, scope)
  local answer = held_claim(key, false, scope)
  if answer then return answer end
  if legacy then
    answer = held_claim(legacy, true, scope)
    if answer then return answer end
  end
  redis.call('SET', key, 'c:' .. token, 'PX', lease_ms)
  if legacy then redis.call('SET', legacy, 'c:' .. token, 'PX', lease_ms, 'NX') end
  return {1, 0}
end
