-- _debounce.lua: a fragment, not a script. Included (--#include _debounce) by
-- enqueue_stream.lua, which queues the jobs of debounced tasks
-- (@app.task(debounce=..., debounce_max=...)), and settle_stream.lua, which starts the run
-- an enqueue queued while the job ran.
-- A debounced job always waits in its level's delayed set first. An enqueue with the id of
-- a job that still waits (delayed, in its stream, or in its fairness lane) takes its place
-- in the same call: the old entry goes, the new arguments are delayed `wait` ms from now,
-- but never past `cap` ms after the first of those enqueues (cap 0: no such bound). An
-- enqueue while the job runs (its entry is pending) leaves the run be and keeps the job it
-- brings as the next run, which the job's ending settle queues (it names this key; any
-- later such enqueue replaces it).
-- Keys built here from the job's marker (Keys.job, '<prefix>:job:<id>': the prefix is
-- the marker's name less the id's), so they carry the marker's hash tag and slot:
--   '<prefix>:debounce:<id>' (Keys.debounce_first): the ms of the first enqueue of the
--     waiting run, kept `cap` ms (when it is gone the cap has passed);
--   '<prefix>:next:<id>' (Keys.debounce_next): a hash, the next run: job (encoded), due
--     (ms), place ('<queue>:<level>'), first (ms of its first enqueue), cap (ms).
-- debounce_enqueue(marker, stream, delayed, job, spec, placed, now) -> the enqueue's
--   reply: 'delayed' (a new run), 'merged' (it replaced the waiting run's arguments or
--   the next run's), 'next' (the job runs: this is queued as its next run).
--   spec: '<wait ms> <cap ms> <consumer group>'; placed: the marker's value or false.
-- debounce_next(marker, id, wake): at a debounced job's end (after its marker
--   went), queue the next run if an enqueue left one.
--#include _clock
--#include _marker
--#include _fair

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

local function ms(value)
  return string.format('%.0f', value)
end

local function debounce_enqueue(marker, stream, delayed, job, spec, placed, now)
  local wait, cap, group = string.match(spec, '^(%d+) (%d+) (.*)$')
  wait, cap = tonumber(wait), tonumber(cap)
  local id = job_names(job)
  local prefix = string.sub(marker, 1, #marker - #id - 5)  -- '<prefix>:job:<id>'
  local first_key, next_key = prefix .. ':debounce:' .. id, prefix .. ':next:' .. id
  local place = is_lane(stream) and select(2, fair_names(stream)) or place_of(stream)
  local first, reply = now, 'delayed'
  if placed then
    local was = debounce_take_out(placed, prefix, group, id)
    if was == 'running' then
      local since = tonumber(redis.call('HGET', next_key, 'first'))
      local due = now + wait
      if since and cap > 0 then due = math.max(now, math.min(due, since + cap)) end
      redis.call('HSET', next_key, 'job', job, 'due', ms(due), 'place', place,
        'first', ms(since or now), 'cap', cap)
      return since and 'merged' or 'next'
    elseif was == 'removed' then
      reply = 'merged'
      -- No first enqueue kept: its key outlived the cap, which has passed.
      first = tonumber(redis.call('GET', first_key)) or now - cap
    end
  end
  local due = now + wait
  if cap > 0 then
    due = math.max(now, math.min(due, first + cap))
    if reply == 'delayed' then redis.call('SET', first_key, ms(now), 'PX', cap) end
  end
  redis.call('ZADD', delayed, ms(due), job)
  redis.call('SET', marker, 'delayed ' .. ms(due) .. ' ' .. place)
  return reply
end

local function debounce_next(marker, id, wake)
  local prefix = string.sub(marker, 1, #marker - #id - 5)
  local next_key = prefix .. ':next:' .. id
  local job = redis.call('HGET', next_key, 'job')
  if not job then return end
  local due = redis.call('HGET', next_key, 'due')
  local place = redis.call('HGET', next_key, 'place')
  local first = tonumber(redis.call('HGET', next_key, 'first'))
  local cap = tonumber(redis.call('HGET', next_key, 'cap')) or 0
  redis.call('DEL', next_key)
  redis.call('ZADD', prefix .. ':delayed:' .. place, due, job)
  redis.call('SET', marker, 'delayed ' .. due .. ' ' .. place)
  local left = first and cap > 0 and first + cap - now_ms() or 0
  if left >= 1 then redis.call('SET', prefix .. ':debounce:' .. id, ms(first), 'PX', ms(left)) end
  redis.call('XADD', wake, 'MAXLEN', '16', '*', 'due', '1')
end
