-- take_sorted.lua: reserve the best-ranked jobs of a sorted-backend queue for a worker.
-- KEYS: waiting, inflight, payloads, ranks
-- ARGV: limit (free slots), lease in ms
-- Touches: moves jobs whose lease expired (a dead worker's) from inflight back to waiting
--          at their original rank; then moves up to limit jobs from waiting to inflight,
--          scored by their lease deadline. Nothing is popped without a home: unlike
--          ZPOPMAX alone, a worker that dies after taking a job loses nothing.
-- Returns: {taken, returned, next_deadline_ms}: taken = flat {job id, payload or false};
--          returned = how many expired leases went back; next_deadline_ms = ms until the
--          earliest remaining lease ends (-1 when none).
local limit, lease = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)
for _, id in ipairs(expired) do
  local rank = redis.call('HGET', KEYS[4], id)
  if rank then redis.call('ZADD', KEYS[1], rank, id) end
  redis.call('ZREM', KEYS[2], id)
end
local taken = {}
if limit > 0 then
  local popped = redis.call('ZPOPMIN', KEYS[1], limit)
  local deadline = string.format('%.0f', now + lease)
  for i = 1, #popped, 2 do
    local id = popped[i]
    redis.call('ZADD', KEYS[2], deadline, id)
    taken[#taken + 1] = id
    taken[#taken + 1] = redis.call('HGET', KEYS[3], id)
  end
end
local next_deadline = -1
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if #first == 2 then next_deadline = math.max(0, tonumber(first[2]) - now) end
return {taken, #expired, next_deadline}
