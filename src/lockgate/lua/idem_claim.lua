-- idem_claim.lua: claim an idempotency key before a side effect.
-- KEYS: [1] the claim key, [2] optional: the same claim as lockgate 0.1 named it (job
--       claims were keyed by job id alone); its done marker or live claim is honoured
-- ARGV: owner token, lease in ms, scope (the task name tagging markers under KEYS[2])
-- Touches: SET of 'c:<token>' with the lease as its expiry, only when the key is absent;
--          the same under the 0.1 name when that is absent (a 0.1 worker of a rolling
--          deploy then sees the job is being run).
--          A claim whose owner stopped renewing (it died) expires with its lease and can
--          be taken over; a done marker ('d:<token>') stays for its own, long TTL.
-- Returns: {1, 0} claimed; {0, 0} already done; {-1, ms left on the holder's lease} busy.
-- A marker under the 0.1 name written by this release is tagged 'd:<token>:t:<task>' and
-- counts only for that task; an untagged one (written by 0.1) counts for every task.
local function held(key, legacy)
  local current = redis.call('GET', key)
  if not current then return nil end
  if string.sub(current, 1, 2) == 'd:' then
    local scope = legacy and string.match(current, ':t:(.*)$')
    if scope and scope ~= ARGV[3] then return nil end
    return {0, 0}
  end
  return {-1, math.max(0, redis.call('PTTL', key))}
end
local answer = held(KEYS[1], false)
if answer then return answer end
if KEYS[2] then
  answer = held(KEYS[2], true)
  if answer then return answer end
end
redis.call('SET', KEYS[1], 'c:' .. ARGV[1], 'PX', ARGV[2])
if KEYS[2] then redis.call('SET', KEYS[2], 'c:' .. ARGV[1], 'PX', ARGV[2], 'NX') end
return {1, 0}
