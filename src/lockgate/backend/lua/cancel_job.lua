-- cancel_job.lua: cancel a job: one waiting or delayed is removed and ends cancelled; one
-- running is flagged, for its worker to cancel.
-- KEYS: [1] the job's marker, [2] its cancel flag, [3] the final records' index
--       (Keys.statuses), then the keys of the place the marker named when the caller
--       read it (Keys.place_keys): streams: [4] the stream, [5] its delayed set, [6] for
--       a keyed job waiting, its key's stream (see _fair.lua);
--       sorted: [4] payloads, [5] inflight, [6] delayed, [7] deliveries, [8] waiting,
--       [9] ranks, [10] owners
-- ARGV: [1] the streams' consumer group, [2] the final record of a cancelled job whose
--       payload does not decode (one that does gets its task, attempts and enqueue time
--       in it, as status.FinalRecord names them), [3] its TTL ms (0: none kept), [4] the
--       cancel flag's TTL ms, [5] the marker's value the caller read ('' none), [6] the
--       job id, [7] its status shard (Keys.status_shard)
-- Touches: XDEL of a waiting entry (a keyed one's key leaves the rotation with its last
--          job), ZREM from a delayed set, or ZREM/HDEL from a sorted
--          queue's sets or its key's lane (see _fair_sorted.lua), DEL of the marker (the id is free again) and the final record
--          kept (see _status.lua; this one is JSON); a running job's flag is SET with a
--          TTL to the take it is for (its worker looks), so a late look never cancels a
--          later run of the id. A removed job of a flow cancels its flow (see _flow.lua:
--          the flow's record, named from the marker's prefix, shares its hash tag).
-- Returns: 'cancelled' (removed: it will not run), 'running' (flagged), 'moved' (the
-- marker changed since the caller read it: read again) or 'gone' (no such job waits or
-- runs: unknown, ended, or a lockgate 0.2 marker).
--#include _marker
--#include _fair
--#include _fair_sorted
--#include _flow
local group, placed, job_id = ARGV[1], ARGV[5], ARGV[6]
if (redis.call('GET', KEYS[1]) or '') ~= placed then return 'moved' end
if placed == '' then return 'gone' end

local function running(take)
  redis.call('SET', KEYS[2], take, 'PX', ARGV[4])
  return 'running'
end
local function record_of(payload)
  local ok, job = pcall(cjson.decode, payload or '')
  if not ok or type(job) ~= 'table' then return ARGV[2] end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) + math.floor(tonumber(t[2]) / 1000) / 1000
  return cjson.encode({
    s = 'cancelled', t = job.task, a = (tonumber(job.attempt) or 1) - 1, e = job.enqueued,
    f = now, r = 'cancelled', k = job.key,
  })
end
local function removed(payload)
  mark_end(KEYS[1], KEYS[3], job_id, ARGV[7], record_of(payload), ARGV[3])
  if in_flow(payload) then flow_lib().job_removed(KEYS[1], job_id, payload) end
  return 'cancelled'
end

local entry = string.match(placed, '^(%d+%-%d+) ')
if entry then
  local row = redis.pcall('XPENDING', KEYS[4], group, entry, entry, 1)
  if type(row) == 'table' and not row.err and #row == 1 then return running(entry) end
  local found = redis.call('XRANGE', KEYS[4], entry, entry)
  if #found == 0 then return 'gone' end
  local fields, payload = found[1][2], nil
  for i = 1, #fields, 2 do
    if fields[i] == 'job' then payload = fields[i + 1] end
  end
  redis.call('XDEL', KEYS[4], entry)
  return removed(payload)
end
local queued = string.match(placed, '^fair (%d+%-%d+) ')
if queued then
  local found = redis.call('XRANGE', KEYS[6], queued, queued)
  if #found == 0 then return 'gone' end
  redis.call('XDEL', KEYS[6], queued)
  fair_forget(KEYS[6])
  return removed(found[1][2][2])
end
local due = string.match(placed, '^delayed (%d+) ')
if due then
  for _, payload in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], due, due)) do
    local ok, decoded = pcall(cjson.decode, payload)
    if ok and type(decoded) == 'table' and decoded.id == job_id then
      redis.call('ZREM', KEYS[5], payload)
      return removed(payload)
    end
  end
  return 'gone'
end
if string.match(placed, '^sorted ') then
  if redis.call('ZSCORE', KEYS[5], job_id) then
    return running(redis.call('HGET', KEYS[10], job_id) or '')
  end
  local payload = redis.call('HGET', KEYS[4], job_id)
  if redis.call('ZREM', KEYS[8], job_id) == 1 then
    sorted_promote(KEYS[8], job_id, payload, now_us())  -- its key's next job waits now
  elseif redis.call('ZREM', KEYS[6], job_id) == 0 and not sorted_unlane(KEYS[8], job_id, payload)
      and not sorted_unpark(KEYS[8], job_id, payload) then
    return 'gone'
  end
  redis.call('HDEL', KEYS[4], job_id)
  redis.call('HDEL', KEYS[9], job_id)
  redis.call('HDEL', KEYS[7], job_id)
  redis.call('HDEL', KEYS[10], job_id)
  return removed(payload or nil)
end
return 'gone'
