-- _fair_sorted.lua: a fragment, not a script. Included (--#include _fair_sorted) by the
-- sorted backend's scripts that queue, hand out, count or remove jobs of tasks with a
-- fairness key (@app.task(key_by=...)).
-- The sorted backend ranks a queue's jobs in one sorted set (waiting). Fair shares there:
-- each fairness key of a level has at most one job in waiting, its *head*; its other jobs
-- wait in the key's lane, '<prefix>:sorted-lane:<queue>:<level>:<key>' (Keys.sorted_lane),
-- a sorted set of ids scored by their enqueue stamp (us). When a take hands the head out
-- (or a cancel or purge removes it) the key's next job becomes its head, ranked as a job
-- enqueued now: behind every job already waiting, so the keys with jobs waiting take
-- turns, a key with 100,000 jobs as often as a key with 3, and the levels keep their
-- boosts. (Jobs without a key are each their own turn, as they always were here.) A lane
-- job keeps its payload and rank in the queue's hashes like any job, so its status,
-- cancel and dead-letter replay are unchanged; its rank's boost is its lane score less
-- its rank.
-- The hash '<prefix>:sorted:<queue>:heads' (Keys.sorted_heads) maps '<level> <key>' to
-- the id of the key's head, and '' to the number of jobs in lanes (for the counts).
-- Delayed jobs and retries join their key's lane when they fall due; an expired lease's
-- job goes back to waiting as it was (one more of its key's jobs there).
-- Names built here from a key the caller passed (the queue's waiting set), so they carry
-- its hash tag and slot.
-- sorted_fair_of(waiting, payload) -> the heads hash, the head's field and the lane of an
--   encoded job with a fairness key, else nil.
-- sorted_place(waiting, id, rank, stamp, payload) -> true when the job went to its key's
--   lane (its key has a head); else it is the key's head now (the caller puts it in
--   waiting at `rank`), or has no key.
-- sorted_promote(waiting, id, payload, stamp) -> the stamp after the last one it used:
--   after the job `id` left waiting, its key's next job becomes the head (ranked at
--   `stamp` less its boost) when `id` was the head.
-- sorted_unlane(waiting, id, payload) -> true when the job was in its key's lane (and is
--   no longer).
-- sorted_laned(waiting) -> the number of jobs waiting in lanes (and parked).
-- Limits (@app.task(key_concurrency=N); N from Keys.fair_limits, as on the streams
-- backend): a job of a limited task takes a slot of its task and key when a take hands
-- it out: a member (its id) of the sorted set Keys.fair_slots, held while the job is in
-- flight and given back by its owner's settle (sorted_release; a zombie's settle gives
-- back nothing). A member whose job is no longer in flight (a lease that expired: the
-- job went back to waiting, and takes a slot again when taken again) is dropped when the
-- slots are counted at the limit. A job whose key is at its task's limit is not handed
-- out but *parked*: its id leaves waiting for the sorted set
-- '<prefix>:sorted-parked/...' (Keys.sorted_parked, ids by rank; listed in
-- '<prefix>:sorted:<queue>:parked' for the purge), so it holds back neither its key's
-- other jobs nor any other key's; each slot given back (or found stale) returns one
-- parked job to waiting, at its rank.
-- sorted_park(waiting, inflight, id, payload, rank) -> true when the job was parked; else
--   it may be handed out (with its slot taken, when its task has a limit).
-- sorted_release(waiting, id, payload): give back the job's slot and return a parked
--   job of its task and key to waiting.
-- sorted_unpark(waiting, id, payload) -> true when the job was parked (and is no longer).
-- sorted_sweep_parked(waiting): each take looks at the first 16 parked sets: one whose
--   task has no limit any more (a deploy without it) goes back to waiting whole, and one
--   whose key has slots free (their holders' settles were lost) returns that many jobs.
--#include _clock

local function sorted_fair_of(waiting, payload)
  if not payload or not string.find(payload, '"key":"', 1, true) then return nil end
  local ok, job = pcall(cjson.decode, payload)
  if not ok or type(job) ~= 'table' or type(job.key) ~= 'string' or job.key == ''
      or type(job.level) ~= 'string' then
    return nil
  end
  local prefix, queue = string.match(waiting, '^(.-):sorted:(.+):waiting$')
  return prefix .. ':sorted:' .. queue .. ':heads', job.level .. ' ' .. job.key,
    prefix .. ':sorted-lane:' .. queue .. ':' .. job.level .. ':' .. job.key, job
end

local sorted_limits = {}  -- task -> key_concurrency, read once per call

-- The slots and parked keys of a keyed job whose task has a limit, and the limit; nil
-- for another job.
local function sorted_limited(waiting, payload)
  local heads, _, _, job = sorted_fair_of(waiting, payload)
  if not heads or type(job.task) ~= 'string' then return nil end
  local prefix, queue = string.match(waiting, '^(.-):sorted:(.+):waiting$')
  local limit = sorted_limits[job.task]
  if limit == nil then
    limit = tonumber(redis.call('HGET', prefix .. ':fair-limits', job.task) or '0') or 0
    sorted_limits[job.task] = limit
  end
  if limit <= 0 then return nil end
  local task, key = job.task, job.key
  return prefix .. ':slots/' .. #task .. ':' .. task .. ':' .. key,
    prefix .. ':sorted-parked/' .. #queue .. ':' .. queue .. ':' .. #task .. ':' .. task
      .. ':' .. key,
    limit, heads
end

-- Return up to n parked jobs of a parked set to waiting, at their ranks.
local function sorted_return_parked(waiting, parked, heads, n)
  for _ = 1, n do
    local popped = redis.call('ZPOPMIN', parked)
    if #popped == 0 then break end
    redis.call('ZADD', waiting, popped[2], popped[1])
    redis.call('HINCRBY', heads, '', -1)
  end
  if redis.call('ZCARD', parked) == 0 then
    redis.call('ZREM', string.gsub(waiting, 'waiting$', 'parked'), parked)
  end
end

local function sorted_park(waiting, inflight, id, payload, rank)
  local slots, parked, limit, heads = sorted_limited(waiting, payload)
  if not slots then return false end
  redis.call('ZREM', slots, id)  -- its own, from a run whose lease expired
  if redis.call('ZCARD', slots) >= limit then
    local freed = 0
    for _, member in ipairs(redis.call('ZRANGE', slots, 0, -1)) do
      if not redis.call('ZSCORE', inflight, member) then
        redis.call('ZREM', slots, member)
        freed = freed + 1
      end
    end
    if freed > 0 then sorted_return_parked(waiting, parked, heads, freed) end
  end
  if redis.call('ZCARD', slots) < limit then
    redis.call('ZADD', slots, now_ms(), id)
    return false
  end
  redis.call('ZADD', parked, rank, id)
  redis.call('ZADD', string.gsub(waiting, 'waiting$', 'parked'), 0, parked)
  redis.call('HINCRBY', heads, '', 1)
  return true
end

local function sorted_release(waiting, id, payload)
  local slots, parked, _, heads = sorted_limited(waiting, payload)
  if slots and redis.call('ZREM', slots, id) == 1 then
    sorted_return_parked(waiting, parked, heads, 1)
  end
end

local function sorted_unpark(waiting, id, payload)
  local slots, parked, _, heads = sorted_limited(waiting, payload)
  if not slots or redis.call('ZREM', parked, id) == 0 then return false end
  redis.call('HINCRBY', heads, '', -1)
  if redis.call('ZCARD', parked) == 0 then
    redis.call('ZREM', string.gsub(waiting, 'waiting$', 'parked'), parked)
  end
  return true
end

local function sorted_place(waiting, id, rank, stamp, payload)
  local heads, field, lane = sorted_fair_of(waiting, payload)
  if not heads then return false end
  local head = redis.call('HGET', heads, field)
  -- A head that is no longer waiting (a path that took it out without promoting the next
  -- one) is replaced by this job: the key's lane moves on when it is taken.
  if head and head ~= id and redis.call('ZSCORE', waiting, head) then
    redis.call('ZADD', lane, string.format('%.0f', stamp), id)
    redis.call('HINCRBY', heads, '', 1)
    return true
  end
  redis.call('HSET', heads, field, id)
  return false
end

local function sorted_promote(waiting, id, payload, stamp)
  local heads, field, lane = sorted_fair_of(waiting, payload)
  if not heads or redis.call('HGET', heads, field) ~= id then return stamp end
  local ranks = string.gsub(waiting, 'waiting$', 'ranks')
  while true do
    local popped = redis.call('ZPOPMIN', lane)
    if #popped == 0 then
      redis.call('HDEL', heads, field)
      return stamp
    end
    redis.call('HINCRBY', heads, '', -1)
    local next_id, queued = popped[1], tonumber(popped[2])
    local rank = tonumber(redis.call('HGET', ranks, next_id) or '')
    if rank then  -- (a lane member without a rank was purged by hand: skip it)
      local boost = queued - rank
      rank = string.format('%.0f', stamp - boost)
      redis.call('HSET', ranks, next_id, rank)
      redis.call('ZADD', waiting, rank, next_id)
      redis.call('HSET', heads, field, next_id)
      return stamp + 1
    end
  end
end

local function sorted_unlane(waiting, id, payload)
  local heads, _, lane = sorted_fair_of(waiting, payload)
  if not heads or redis.call('ZREM', lane, id) == 0 then return false end
  redis.call('HINCRBY', heads, '', -1)
  return true
end

local function sorted_laned(waiting)
  local heads = string.gsub(waiting, 'waiting$', 'heads')
  return tonumber(redis.call('HGET', heads, '') or '0') or 0
end

local function sorted_sweep_parked(waiting)
  local registry = string.gsub(waiting, 'waiting$', 'parked')
  local heads = string.gsub(waiting, 'waiting$', 'heads')
  local payloads = string.gsub(waiting, 'waiting$', 'payloads')
  for _, parked in ipairs(redis.call('ZRANGE', registry, 0, 15)) do
    local first = redis.call('ZRANGE', parked, 0, 0)[1]
    local slots, _, limit = nil, nil, 0
    if first then slots, _, limit = sorted_limited(waiting, redis.call('HGET', payloads, first)) end
    if not slots then  -- no limit now (or a job gone by hand): every job goes back
      sorted_return_parked(waiting, parked, heads, 1000)
    else
      local free = limit - redis.call('ZCARD', slots)
      if free > 0 then sorted_return_parked(waiting, parked, heads, free) end
    end
  end
end
