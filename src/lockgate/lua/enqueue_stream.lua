-- enqueue_stream.lua: add jobs to their streams, or to their streams' delayed sets, unless
-- their job id is already queued, delayed or running.
-- KEYS: for job i, KEYS[3i-2] = job marker, KEYS[3i-1] = its stream, KEYS[3i] = its delayed
--       set; last, the namespace's wake stream
-- ARGV: for job i, ARGV[2i-1] = encoded job, ARGV[2i] = delay in ms (0: now)
-- Touches: markers (SET), streams (XADD, field "job"), delayed sets (ZADD, scored by the
--          server's clock + delay) and then one XADD to the wake stream (MAXLEN 16) so idle
--          workers learn the new due time; nothing else is trimmed.
-- Returns: for job i, its stream entry id, 'delayed', or 0 when the id was taken.
-- A call retried after its reply was lost (redis-py retries a call whose connection
-- failed) finds its own job there, the very same encoded bytes: it answers as the first
-- time did instead of calling the job a duplicate. Within one call an id counts once.
--#include _clock
local out = {}
local now
local wake = KEYS[#KEYS]
local added_here = {}

-- The reply that stored ``job`` under ``marker`` (entry id or 'delayed'), or 0 (also for
-- a marker another backend or version wrote: 'sorted', ...).
local function stored_reply(marker, stream, delayed, job)
  if added_here[marker] then return 0 end
  local placed = redis.call('GET', marker)
  if placed == 'delayed' then
    if redis.call('ZSCORE', delayed, job) then return 'delayed' end
  elseif placed and string.match(placed, '^%d+%-%d+$') then
    local entries = redis.call('XRANGE', stream, placed, placed)
    local fields = entries[1] and entries[1][2]
    if fields and fields[1] == 'job' and fields[2] == job then return placed end
  end
  return 0
end

for i = 1, #ARGV / 2 do
  local marker, stream, delayed = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local job, delay = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
  if redis.call('EXISTS', marker) == 1 then
    out[i] = stored_reply(marker, stream, delayed, job)
    if out[i] ~= 0 then added_here[marker] = true end
  elseif delay > 0 then
    if not now then
      now = now_ms()
    end
    redis.call('ZADD', delayed, string.format('%.0f', now + delay), job)
    redis.call('SET', marker, 'delayed')
    added_here[marker] = true
    out[i] = 'delayed'
  else
    local id = redis.call('XADD', stream, '*', 'job', job)
    redis.call('SET', marker, id)
    added_here[marker] = true
    out[i] = id
  end
end
if now then redis.call('XADD', wake, 'MAXLEN', '16', '*', 'due', '1') end
return out
