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
-- sorted_laned(waiting) -> the number of jobs waiting in lanes.

local function sorted_fair_of(waiting, payload)
  if not payload or not string.find(payload, '"key":"', 1, true) then return nil end
  local ok, job = pcall(cjson.decode, payload)
  if not ok or type(job) ~= 'table' or type(job.key) ~= 'string' or job.key == ''
      or type(job.level) ~= 'string' then
    return nil
  end
  local prefix, queue = string.match(waiting, '^(.-):sorted:(.+):waiting$')
  return prefix .. ':sorted:' .. queue .. ':heads', job.level .. ' ' .. job.key,
    prefix .. ':sorted-lane:' .. queue .. ':' .. job.level .. ':' .. job.key
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
