-- _debounce.lua: a fragment, not a script. Included (--#include _debounce) by the enqueue
-- scripts, which queue the jobs of debounced tasks (@app.task(debounce=...,
-- debounce_max=...)), and the settle scripts, which start the run an enqueue queued
-- while the job ran.
-- A debounced job always waits for a due time first (streams: its level's delayed set;
-- sorted: its queue's). An enqueue with the id of a job that still waits (delayed, or due
-- and not handed out: in its stream, its fairness lane, or the sorted queue's waiting set)
-- takes its place in the same call: the old entry goes, the new arguments are due `wait`
-- ms from now, but never past `cap` ms after the first of those enqueues (cap 0: no such
-- bound). An enqueue while the job runs (its entry is pending, or it is in flight) leaves
-- the run be and keeps the job it brings as the next run, which the settle call that
-- ends the run queues, only when it is the run's owner's (a zombie's settle changes
-- nothing); a later such enqueue replaces it.
-- Keys built here from the job's marker (Keys.job, '<prefix>:job:<id>': the prefix is
-- the marker's name less the id's), so they carry the marker's hash tag and slot:
--   '<prefix>:debounce:<id>' (Keys.debounce_first): the ms of the first enqueue of the
--     waiting run, kept `cap` ms (when it is gone the cap has passed);
--   '<prefix>:next:<id>' (Keys.debounce_next): a hash, the next run: job (encoded), due
--     (ms), first (ms of its first enqueue), cap (ms), at (streams: '<queue>:<level>';
--     sorted: the level's boost in us).
-- debounce_enqueue(marker, stream, delayed, job, spec, placed, now) -> the streams
--   enqueue's reply: 'delayed' (a new run), 'merged' (it replaced the waiting run's
--   arguments or the next run's), 'next' (the job runs: this is queued as its next run).
--   spec: '<wait ms> <cap ms> <consumer group>'; placed: the marker's value or false.
-- debounce_next(marker, id, wake): at a debounced job's end (after its marker went),
--   queue the next run if an enqueue left one.
-- The sorted backend's two are in _debounce_sorted.lua.
--#include _clock
--#include _marker
--#include _fair

local function ms(value)
  return string.format('%.0f', value)
end

-- The job's prefix, first-enqueue key and next-run key.
local function debounce_names(marker, id)
  local prefix = string.sub(marker, 1, #marker - #id - 5)  -- '<prefix>:job:<id>'
  return prefix, prefix .. ':debounce:' .. id, prefix .. ':next:' .. id
end

-- Keep `job` as the next run of a running job; 'next' for the first, 'merged' after.
local function debounce_queue_next(next_key, job, now, wait, cap, at)
  local since = tonumber(redis.call('HGET', next_key, 'first'))
  local due = now + wait
  if since and cap > 0 then due = math.max(now, math.min(due, since + cap)) end
  redis.call('HSET', next_key, 'job', job, 'due', ms(due), 'first', ms(since or now),
    'cap', cap, 'at', at)
  return since and 'merged' or 'next'
end

-- When a debounced run is due (ms): `wait` after now, never past `cap` after the first
-- enqueue of the run (`merged`: this one took a waiting run's place, else it is the
-- first, and is kept as such).
local function debounce_due(first_key, merged, now, wait, cap)
  local due = now + wait
  if cap <= 0 then return due end
  if not merged then  -- the first: its own delay (an explicit one may be longer) holds
    redis.call('SET', first_key, ms(now), 'PX', cap)
    return due
  end
  -- No first enqueue kept: its key outlived the cap, which has passed.
  local first = tonumber(redis.call('GET', first_key)) or now - cap
  return math.max(now, math.min(due, first + cap))
end

-- The next run an enqueue left (job, due, at), gone from its key, its first enqueue kept
-- for what is left of its cap; nil when none.
local function debounce_take_next(marker, id)
  local _, first_key, next_key = debounce_names(marker, id)
  local job = redis.call('HGET', next_key, 'job')
  if not job then return nil end
  local due = redis.call('HGET', next_key, 'due')
  local at = redis.call('HGET', next_key, 'at')
  local first = tonumber(redis.call('HGET', next_key, 'first'))
  local cap = tonumber(redis.call('HGET', next_key, 'cap')) or 0
  redis.call('DEL', next_key)
  local left = first and cap > 0 and first + cap - now_ms() or 0
  if left >= 1 then redis.call('SET', first_key, ms(first), 'PX', ms(left)) end
  return job, due, at
end

-- Take a waiting job out of the place its marker names: 'removed', 'running' (its entry
-- is pending: a worker has it) or 'gone' (not where the marker says).
local function debounce_take_out(placed, prefix, group, id)
  local due, place = string.match(placed, '^delayed (%d+) (%S+)$')
  if due then
    local delayed = prefix .. ':delayed:' .. place
    for _, payload in ipairs(redis.call('ZRANGEBYSCORE', delayed, due, due)) do
      if job_names(payload) == id then
        redis.call('ZREM', delayed, payload)
        return 'removed'
      end
    end
    return 'gone'
  end
  local queued, level, lane = string.match(placed, '^fair (%d+%-%d+) (%S+) (.*)$')
  if queued then
    local jobs = prefix .. ':fair:' .. level .. ':' .. lane
    if redis.call('XDEL', jobs, queued) == 0 then return 'gone' end
    fair_forget(jobs)
    return 'removed'
  end
  local entry, at = string.match(placed, '^(%d+%-%d+) (%S+)$')
  if not entry then return 'gone' end
  local stream = prefix .. ':stream:' .. at
  local row = redis.pcall('XPENDING', stream, group, entry, entry, 1)
  if type(row) == 'table' and not row.err and #row == 1 then return 'running' end
  if redis.call('XDEL', stream, entry) == 0 then return 'gone' end
  return 'removed'
end

local function debounce_enqueue(marker, stream, delayed, job, spec, placed, now)
  local wait, cap, group = string.match(spec, '^(%d+) (%d+) (.*)$')
  wait, cap = tonumber(wait), tonumber(cap)
  local id = job_names(job)
  local prefix, first_key, next_key = debounce_names(marker, id)
  local place = is_lane(stream) and select(2, fair_names(stream)) or place_of(stream)
  local was = placed and debounce_take_out(placed, prefix, group, id) or 'gone'
  if was == 'running' then return debounce_queue_next(next_key, job, now, wait, cap, place) end
  local due = ms(debounce_due(first_key, was == 'removed', now, wait, cap))
  redis.call('ZADD', delayed, due, job)
  redis.call('SET', marker, 'delayed ' .. due .. ' ' .. place)
  return was == 'removed' and 'merged' or 'delayed'
end

local function debounce_next(marker, id, wake)
  local job, due, place = debounce_take_next(marker, id)
  if not job then return end
  local prefix = debounce_names(marker, id)
  redis.call('ZADD', prefix .. ':delayed:' .. place, due, job)
  redis.call('SET', marker, 'delayed ' .. due .. ' ' .. place)
  redis.call('XADD', wake, 'MAXLEN', '16', '*', 'due', '1')
end
