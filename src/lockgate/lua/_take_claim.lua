-- _take_claim.lua: a fragment, not a script. Included (--#include _take_claim) by
-- idem_claim.lua and read_stream.lua (which claims the jobs of idempotent tasks as it reads
-- them, so a claim costs no round trip of its own).
-- take_claim(key, other, legacy, token, lease_ms, scope, done_prefix, mirror) claims an
-- idempotency key before a side effect: SET of 'c:<token>' with the lease as its expiry,
-- only when the key is absent and not done. A claim whose owner stopped renewing (it died)
-- expires with its lease and can be taken over.
-- Done is, in this order: a 'd:<token>' value under the key (written by lockgate 0.2, or
-- by this release with App(legacy_markers=True)); the key's bucketed marker (see
-- _done_marker.lua; done_prefix is the buckets' prefix); the same two under other (nil,
-- or the claim's other name: its 0.2/0.3 name 'job:<task>:<id>', or with legacy_markers,
-- which claim under that name, the unambiguous one; read only, never written here); a
-- done marker under the 0.1 name (legacy, or nil): a marker tagged 'd:<token>:t:<task>'
-- (written by 0.2, or with legacy_markers) counts only for that task (scope), an untagged
-- one (written by 0.1) for every task. A live claim under any of the names is busy.
-- With mirror = '1' (legacy_markers) the claim is also SET under the 0.1 name when that is
-- absent, so a 0.1 worker of a rolling deploy sees the job is being run.
-- Returns: {1, 0} claimed; {0, 0} already done; {-1, ms left on the holder's lease} busy.
--#include _done_marker
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

local function take_claim(key, other, legacy, token, lease_ms, scope, done_prefix, mirror)
  local answer = held_claim(key, false, scope)
  if answer then return answer end
  if marker_done(done_prefix, key) then return {0, 0} end
  if other then
    answer = held_claim(other, false, scope)
    if answer then return answer end
    if marker_done(done_prefix, other) then return {0, 0} end
  end
  if legacy then
    answer = held_claim(legacy, true, scope)
    if answer then return answer end
  end
  redis.call('SET', key, 'c:' .. token, 'PX', lease_ms)
  if legacy and mirror == '1' then
    redis.call('SET', legacy, 'c:' .. token, 'PX', lease_ms, 'NX')
  end
  return {1, 0}
end
