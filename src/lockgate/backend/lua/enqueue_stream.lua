-- enqueue_stream.lua: add jobs to their streams, or to their streams' delayed sets, unless
-- their job id is already queued, delayed or running, or their once-only key (a cron
-- tick's) was taken.
-- KEYS: for job i, KEYS[4i-3] = job marker, KEYS[4i-2] = its stream (a job with a fairness
--       key: its key's stream, Keys.fair_jobs, see _fair.lua), KEYS[4i-1] = its
--       delayed set, KEYS[4i] = its once-only key (any key when it has none); last, the
--       namespace's wake stream
-- ARGV: for job i, ARGV[3i-2] = encoded job, ARGV[3i-1] = delay in ms (0: now), or for
--       a job of a debounced task '<wait ms> <cap ms> <consumer group>' (see
--       _debounce.lua), ARGV[3i] = the once-only key's TTL ms (0: none)
-- Touches: markers (SET, see _marker.lua), once-only keys (SET NX PX), streams (XADD,
--          field "job"; a keyed job: its key's stream and the rotation, see _fair.lua),
--          delayed sets (ZADD, scored by the server's clock + delay) and then one XADD to
--          the wake stream (MAXLEN 16) so idle workers learn the new due time (or, for a
--          keyed job, that it waits where they do not block); nothing else is trimmed.
-- Returns: for job i, its stream entry id, 'delayed', or 0 when the id or tick was taken;
-- for a debounced job 'delayed', 'merged' (it took a waiting run's place) or 'next'
-- (queued to run after the running one).
-- A call retried after its reply was lost (redis-py retries a call whose connection
-- failed) finds its own job there, the very same encoded bytes: it answers as the first
-- time did instead of calling the job a duplicate. Within one call an id counts once.
--#include _clock
--#include _marker
--#include _fair
--#include _debounce
local out = {}
local now, keyed
local wake = KEYS[#KEYS]
local added_here = {}

-- Where a marker placed so says a job of `stream` is: `stream`, or for a keyed job the
-- lane it waits in or the delivery stream a read moved it to (see _fair.lua).
local function stored_in(placed, stream)
  if not is_lane(stream) then return stream end
  local rotation = fair_names(stream)
  local lane = string.match(placed, '^fair %S+ %S+ (.*)$')
  if lane then return rotation .. ':' .. lane end
  local moved = string.match(placed, '^%S+ (%S+%+)$')
  if moved then return string.match(rotation, '^(.-}):fair:') .. ':stream:' .. moved end
  return stream
end

-- The reply that stored ``job`` under a marker placed so (entry id or 'delayed'), or 0
-- (also for a marker another backend or version wrote: 'sorted', ...).
local function stored_reply(marker, placed, stream, delayed, job)
  if added_here[marker] then return 0 end
  local entry = string.match(placed, '^(%d+%-%d+)')
    or string.match(placed, '^fair (%d+%-%d+) ')
  if string.match(placed, '^delayed') then
    if redis.call('ZSCORE', delayed, job) then return 'delayed' end
  elseif entry then
    local entries = redis.call('XRANGE', stored_in(placed, stream), entry, entry)
    local fields = entries[1] and entries[1][2]
    if fields and fields[1] == 'job' and fields[2] == job then return entry end
  end
  return 0
end

for i = 1, #ARGV / 3 do
  local marker, stream, delayed = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1]
  local job, delay = ARGV[3 * i - 2], tonumber(ARGV[3 * i - 1])
  local fair = is_lane(stream)
  local placed = redis.call('GET', marker)
  local stored = placed and stored_reply(marker, placed, stream, delayed, job) or 0
  if stored ~= 0 then  -- this call's own job, retried: answer as the first time
    out[i] = stored
    added_here[marker] = true
  elseif not delay and not take_once(KEYS[4 * i], ARGV[3 * i]) then
    out[i] = 0  -- a debounced job relayed again from an outbox row: no second run
  elseif not delay then  -- a debounced job (a later one of the id in this call merges)
    now = now or now_ms()
    out[i] = debounce_enqueue(marker, stream, delayed, job, ARGV[3 * i - 1], placed, now)
    added_here[marker] = true
  elseif placed then
    out[i] = 0
  elseif not take_once(KEYS[4 * i], ARGV[3 * i]) then
    out[i] = 0
  elseif delay > 0 then
    if not now then
      now = now_ms()
    end
    local due = string.format('%.0f', now + delay)
    redis.call('ZADD', delayed, due, job)
    local place = fair and select(2, fair_names(stream)) or place_of(stream)
    redis.call('SET', marker, 'delayed ' .. due .. ' ' .. place)
    added_here[marker] = true
    out[i] = 'delayed'
  elseif fair then
    out[i] = fair_add(stream, job, marker)
    added_here[marker] = true
    keyed = true
  else
    local id = redis.call('XADD', stream, '*', 'job', job)
    redis.call('SET', marker, id .. ' ' .. place_of(stream))
    added_here[marker] = true
    out[i] = id
  end
end
if now or keyed then redis.call('XADD', wake, 'MAXLEN', '16', '*', 'due', '1') end
return out
