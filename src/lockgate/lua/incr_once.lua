-- incr_once.lua: an increment guarded by a request id (the lesson's track_view_safe).
-- KEYS: the request-id guard, the counter, optional: the guard's other name (its 0.2/0.3
--       name 'request:<counter>:<request id>', or with App(legacy_markers=True), which
--       guards under that name, the unambiguous one): a request guarded there is repeated
-- ARGV: guard TTL in ms, amount
-- Touches: SET NX PX of the guard; INCRBY of the counter only when the guard was new (and
--          no guard is under the other name, which is only read).
-- Returns: {1, new value} when counted, {0, current value} for a repeated request id.
if not (KEYS[3] and redis.call('EXISTS', KEYS[3]) == 1)
    and redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then
  return {1, redis.call('INCRBY', KEYS[2], ARGV[2])}
end
return {0, tonumber(redis.call('GET', KEYS[2]) or '0')}
