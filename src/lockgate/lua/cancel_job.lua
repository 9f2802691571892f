-- cancel_job.lua: cancel a job: one waiting or delayed is removed and ends cancelled; one
-- running is flagged, for its worker to cancel.
-- KEYS: [1] the job's marker, [2] its cancel flag, [3] its status key
-- ARGV: [1] the streams' consumer group, [2] the final record of a cancelled job, [3] its
--       TTL ms (0: no record, the marker goes), [4] the cancel flag's TTL ms
-- Touches (KEYS not passed, all in the namespace's slot: the stream, delayed set or sorted
-- sets the marker names, see _marker.lua): XDEL of a waiting entry, ZREM from a delayed
-- set, or ZREM/HDEL from a sorted queue's sets, DEL of the marker (the id is free again)
-- and the final record SET under the status key; a running job's flag is SET with a TTL to the take it is for
-- (its worker looks).
-- Returns: 'cancelled' (removed: it will not run), 'running' (flagged), or 'gone' (no
-- such job waits or runs: unknown, ended, or a lockgate 0.2 marker).
--#include _marker
local marker, flag, group = KEYS[1], KEYS[2], ARGV[1]
local placed = redis.call('GET', marker)
if not placed then return 'gone' end
local prefix, job_id = string.match(marker, '^(.-):job:(.*)$')

-- The flag names the take it is for (entry id, or take token), so a late look by a
-- worker never cancels a later run of the same id.
local function running(take)
  redis.call('SET', flag, take, 'PX', ARGV[4])
  return 'running'
end
local function removed()
  mark_end(marker, KEYS[3], ARGV[2], ARGV[3])
  return 'cancelled'
end

local entry, place = string.match(placed, '^(%d+%-%d+) (.+)$')
if entry then
  local stream = prefix .. ':stream:' .. place
  local row = redis.pcall('XPENDING', stream, group, entry, entry, 1)
  if type(row) == 'table' and not row.err and #row == 1 then return running(entry) end
  if redis.call('XDEL', stream, entry) == 1 then return removed() end
  return 'gone'
end
local due, delayed_place = string.match(placed, '^delayed (%d+) (.+)$')
if due then
  local delayed = prefix .. ':delayed:' .. delayed_place
  for _, payload in ipairs(redis.call('ZRANGEBYSCORE', delayed, due, due)) do
    local ok, decoded = pcall(cjson.decode, payload)
    if ok and type(decoded) == 'table' and decoded.id == job_id then
      redis.call('ZREM', delayed, payload)
      return removed()
    end
  end
  return 'gone'
end
local queue = string.match(placed, '^sorted (.+)$')
if queue then
  local base = prefix .. ':sorted:' .. queue .. ':'
  if redis.call('ZSCORE', base .. 'inflight', job_id) then
    return running(redis.call('HGET', base .. 'owners', job_id) or '')
  end
  local taken = redis.call('ZREM', base .. 'waiting', job_id)
    + redis.call('ZREM', base .. 'delayed', job_id)
  if taken == 0 then return 'gone' end
  redis.call('HDEL', base .. 'payloads', job_id)
  redis.call('HDEL', base .. 'ranks', job_id)
  redis.call('HDEL', base .. 'deliveries', job_id)
  return removed()
end
return 'gone'
