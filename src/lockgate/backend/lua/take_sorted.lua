-- take_sorted.lua: reserve the best-ranked jobs of a sorted-backend queue for a worker.
-- KEYS: waiting, inflight, payloads, ranks, delayed, deliveries, owners, wake (a stream),
--       the namespace's paused queues (Keys.paused: a sorted set of queue names), the
--       liveness set (see _liveness.lua)
-- ARGV: limit (free slots), lease in ms, consumer name, quiet ms, gap ms (see
--       _liveness.lua), all ('1' when the m ids below are every job this worker runs or
--       settles: an expired lease of its own that is not among them is then put back, a
--       take whose reply was lost), m, then m job ids this worker still
--       runs or settles (their heartbeats lapsed, e.g. Redis was unreachable): their
--       expired leases are left for the worker's next heartbeat, never handed out again;
--       then the job claims to take (see _read_claim.lua)
-- Touches: moves due delayed jobs to waiting (a keyed one to its key's lane when the key
--          has a job waiting; a taken key's head is replaced by its next, see
--          _fair_sorted.lua), and jobs whose lease expired and whose worker
--          is known dead (see _liveness.lua) from inflight back to waiting, both at their
--          stored rank; an expired lease of a worker that is alive, or whose death is not
--          known yet (Redis was away), is extended on its behalf until it can be judged
--          again (its record's end, or the end of the quiet period); then moves
--          up to limit jobs from waiting to inflight, scored by their lease deadline, counts
--          each delivery and records the take's owner token (consumer, delivery count,
--          server time) in owners: only that take may settle or extend the job. Nothing is
--          popped without a home: unlike ZPOPMAX alone, a worker that dies after taking a
--          job loses nothing.
--          A job of an idempotent task is claimed as it is taken, with the token
--          '<token prefix>:<job id>' (see _read_claim.lua).
-- Paused: while the queue (named by the keys, see _marker.lua) is paused, nothing is
--          taken, so no worker takes a job from it once the pause's ZADD returned; due
--          delayed jobs and expired leases still go back to waiting, and wait there.
-- Returns: {taken, returned, next_ms, wake_id}: taken = flat {job id, payload or false,
--          deliveries, owner token, claim, ms} (claim: 1 claimed, 0 already done, -1 busy
--          with ms left on the holder's lease, 2 not claimed here); returned = expired leases put back; next_ms = ms until
--          the earliest lease ends or delayed job is due (-1 when none); wake_id = the wake
--          stream's last id ('0-0' when it does not exist), to block on from there.
--#include _clock
--#include _last_id
--#include _read_claim
--#include _marker
--#include _liveness
--#include _fair_sorted
local limit, lease, consumer = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local quiet, gap, all = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6] == '1'
if redis.call('ZSCORE', KEYS[9], queue_of(KEYS[1])) then limit = 0 end
local stamp = now_us()
local now = math.floor(stamp / 1000)
local mine = {}
local m = tonumber(ARGV[7])
for i = 8, 7 + m do mine[ARGV[i]] = true end
local claims = read_claims(8 + m)
local function requeue(from, ids)
  for _, id in ipairs(ids) do
    if not (from == KEYS[2] and mine[id]) then
      local rank = redis.call('HGET', KEYS[4], id)
      if rank then redis.call('ZADD', KEYS[1], rank, id) end
      redis.call('ZREM', from, id)
    end
  end
end
-- Due delayed jobs go back at their stored rank, a keyed one to its key's lane when its
-- key has a job waiting (its lane score: its due time in us, kept to the microsecond in
-- delayed, so that the score less its rank is its level's boost; see _fair_sorted.lua).
local due = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', string.format('%.3f', stamp / 1000),
  'WITHSCORES', 'LIMIT', 0, 1000)
for i = 1, #due, 2 do
  local id = due[i]
  local rank = redis.call('HGET', KEYS[4], id)
  if rank and not sorted_place(KEYS[1], id, rank, tonumber(due[i + 1]) * 1000,
      redis.call('HGET', KEYS[3], id)) then
    redis.call('ZADD', KEYS[1], rank, id)
  end
  redis.call('ZREM', KEYS[5], id)
end
local deadline = string.format('%.0f', now + lease)
local expired, fate = {}, {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)) do
  -- The owner token is '<consumer>:<deliveries>:<server us>' (below).
  local owner = string.match(redis.call('HGET', KEYS[7], id) or '', '^(.*):%d+:%d+$') or ''
  if fate[owner] == nil then
    fate[owner] = (all and owner == consumer) and {true, now}
      or owner_fate(KEYS[10], owner, consumer, now, quiet, gap)
  end
  if fate[owner][1] or mine[id] then
    expired[#expired + 1] = id
  else  -- kept for its worker until it can be judged again
    redis.call('ZADD', KEYS[2], string.format('%.0f', fate[owner][2]), id)
  end
end
requeue(KEYS[2], expired)
local taken = {}
local promoted = stamp  -- the rank stamp of a key's next job made its head (_fair_sorted.lua)
-- Jobs parked (their key at their task's limit) do not count against `limit`, but a call
-- parks at most 256: it stays short however many keys are at their limit.
local parks = 0
if limit > 0 then sorted_sweep_parked(KEYS[1]) end
while #taken < 6 * limit and parks < 256 do
  local popped = redis.call('ZPOPMIN', KEYS[1])
  if #popped == 0 then break end
  local id = popped[1]
  local payload = redis.call('HGET', KEYS[3], id)
  promoted = sorted_promote(KEYS[1], id, payload, promoted)
  if sorted_park(KEYS[1], KEYS[2], id, payload, popped[2]) then
    parks = parks + 1
  else
    redis.call('ZADD', KEYS[2], deadline, id)
    local count = redis.call('HINCRBY', KEYS[6], id, 1)
    local owner = consumer .. ':' .. count .. ':' .. string.format('%.0f', stamp)
    redis.call('HSET', KEYS[7], id, owner)
    local state, ms = claim_job(claims, id, payload)
    taken[#taken + 1] = id
    taken[#taken + 1] = payload
    taken[#taken + 1] = count
    taken[#taken + 1] = owner
    taken[#taken + 1] = state
    taken[#taken + 1] = ms
  end
end
local next_ms = -1
for _, key in ipairs({KEYS[2], KEYS[5]}) do
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #first == 2 then
    local wait = math.max(0, math.ceil(tonumber(first[2]) - stamp / 1000))
    if next_ms < 0 or wait < next_ms then next_ms = wait end
  end
end
return {taken, #expired, next_ms, last_id(KEYS[8])}
