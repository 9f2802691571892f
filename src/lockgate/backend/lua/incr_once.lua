-- incr_once.lua: an increment guarded by a request id (the lesson's track_view_safe).
-- KEYS: the request-id guard, the counter, optional: the guard's 0.2/0.3 name
--       ('request:<counter>:<request id>', which two counters' requests can share)
-- ARGV: guard TTL in ms, amount, mirror ('1': App(legacy_markers=True)), tag ('t:<counter>')
-- Touches: SET NX PX of the guard; INCRBY of the counter only when the guard was new and the
--          0.2/0.3 name holds no guard of this request: '1' (written by 0.2 and 0.3, so it
--          counts for every request of that name until it expires) or this counter's tag.
--          With mirror, a counted request's guard is also SET NX PX under the 0.2/0.3
--          name, valued with the tag (0.2 producers of a rolling deploy look there, and
--          read any value as counted).
-- Returns: {1, new value} when counted, {0, current value} for a repeated request id.
local older = KEYS[3] and redis.call('GET', KEYS[3])
local function current() return tonumber(redis.call('GET', KEYS[2]) or '0') end
if older and (older == '1' or older == ARGV[4]) then return {0, current()} end
if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then return {0, current()} end
if KEYS[3] and ARGV[3] == '1' and not older then
  redis.call('SET', KEYS[3], ARGV[4], 'NX', 'PX', ARGV[1])
end
return {1, redis.call('INCRBY', KEYS[2], ARGV[2])}
