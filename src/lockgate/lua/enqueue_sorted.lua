-- enqueue_sorted.lua: add jobs to one sorted-backend queue unless their id is taken.
-- KEYS: waiting, payloads, ranks, clock, wakeup, then one job marker per job
-- ARGV: per job, three values: job id, boost (us of head start for its level), encoded job
-- Touches: markers (SET NX), waiting (ZADD), payloads and ranks (HSET), clock (SET),
--          wakeup (LPUSH + LTRIM to 64: a short signal list idle workers block on).
-- Stamps come from the server clock and strictly increase per queue, so jobs of one level
-- keep FIFO order and producers' clocks never matter. rank = stamp - boost, lowest first.
-- Returns: per job 1 when added, 0 when its id was already queued or running.
local t = redis.call('TIME')
local stamp = tonumber(t[1]) * 1000000 + tonumber(t[2])
local last = tonumber(redis.call('GET', KEYS[4]) or '0')
if stamp <= last then stamp = last + 1 end
local out, added = {}, 0
for i = 6, #KEYS do
  local j = (i - 6) * 3
  local job_id, boost, payload = ARGV[j + 1], tonumber(ARGV[j + 2]), ARGV[j + 3]
  if redis.call('SET', KEYS[i], 'sorted', 'NX') then
    -- format by hand: Lua's default %.14g would round a microsecond stamp
    local rank = string.format('%.0f', stamp - boost)
    redis.call('ZADD', KEYS[1], rank, job_id)
    redis.call('HSET', KEYS[2], job_id, payload)
    redis.call('HSET', KEYS[3], job_id, rank)
    stamp = stamp + 1
    added = added + 1
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
if added > 0 then
  redis.call('SET', KEYS[4], string.format('%.0f', stamp - 1))
  redis.call('LPUSH', KEYS[5], 1)
  redis.call('LTRIM', KEYS[5], 0, 63)
end
return out
