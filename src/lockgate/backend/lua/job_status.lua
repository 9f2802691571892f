-- job_status.lua: where a job is and what it is, in one read.
-- KEYS: [1] the job's marker, [2] its result key, [3] the final records' index
--       (Keys.statuses), [4] its status key as lockgate 0.3 kept it, then the keys of the
--       place the marker named when the caller read it (Keys.place_keys): streams: [5]
--       the stream, [6] its delayed set, [7] for a keyed job waiting, its key's stream
--       (see _fair.lua); sorted: [5] payloads, [6] inflight, [7] delayed,
--       [8] deliveries
-- ARGV: [1] the streams' consumer group, [2] the marker's value the caller read ('' none),
--       [3] the job id, [4] its status shard (Keys.status_shard)
-- Returns: {state, data, result record or false, extra}:
--   'moved'                     the marker changed since the caller read it: read again
--   'unknown', false            never enqueued, or its final record expired
--   'final', record             ended; record is the worker's JSON (status, times...)
--   'kept', false               ended, its final record expired, its result still kept
--   'waiting', payload          in its stream or sorted set, not taken
--   'running', payload, deliveries   taken by a worker (pending entry, or in flight)
--   'delayed', payload, due ms  waiting for its due time ('waiting' once due)
--   'waiting'/'delayed', false  a marker lockgate 0.2 wrote (no place in it)
-- The marker comes first: a job enqueued again under the id of one that ended is that job.
--#include _status
local group, expected, job_id = ARGV[1], ARGV[2], ARGV[3]
local result = redis.call('GET', KEYS[2])
local placed = redis.call('GET', KEYS[1]) or ''
if placed ~= expected then return {'moved', false, false, 0} end
if placed == '' then
  local record = status_record(KEYS[3], job_id, ARGV[4]) or redis.call('GET', KEYS[4])
  if record then return {'final', record, result, 0} end
  if result then return {'kept', false, result, 0} end
  return {'unknown', false, result, 0}
end

local function id_of(payload)
  local ok, decoded = pcall(cjson.decode, payload)
  return ok and type(decoded) == 'table' and decoded.id or nil
end

local entry = string.match(placed, '^(%d+%-%d+) ')
if entry then
  local found = redis.call('XRANGE', KEYS[5], entry, entry)
  if #found == 0 then return {'unknown', false, result, 0} end
  local fields, payload = found[1][2], false
  for i = 1, #fields, 2 do
    if fields[i] == 'job' then payload = fields[i + 1] end
  end
  local row = redis.pcall('XPENDING', KEYS[5], group, entry, entry, 1)
  if type(row) == 'table' and not row.err and #row == 1 then
    return {'running', payload, result, row[1][4]}
  end
  return {'waiting', payload, result, 0}
end
local queued = string.match(placed, '^fair (%d+%-%d+) ')
if queued then
  local found = redis.call('XRANGE', KEYS[7], queued, queued)
  if #found == 0 then return {'unknown', false, result, 0} end
  return {'waiting', found[1][2][2], result, 0}
end
local due = string.match(placed, '^delayed (%d+) ')
if due then
  for _, payload in ipairs(redis.call('ZRANGEBYSCORE', KEYS[6], due, due)) do
    if id_of(payload) == job_id then
      if tonumber(due) <= now_ms() then return {'waiting', payload, result, 0} end
      return {'delayed', payload, result, tonumber(due)}
    end
  end
  return {'unknown', false, result, 0}
end
if string.match(placed, '^sorted ') then
  local payload = redis.call('HGET', KEYS[5], job_id)
  if not payload then return {'unknown', false, result, 0} end
  if redis.call('ZSCORE', KEYS[6], job_id) then
    return {'running', payload, result, tonumber(redis.call('HGET', KEYS[8], job_id) or '1')}
  end
  local due_at = redis.call('ZSCORE', KEYS[7], job_id)
  if due_at and tonumber(due_at) > now_ms() then
    return {'delayed', payload, result, tonumber(due_at)}
  end
  return {'waiting', payload, result, 0}
end
if string.match(placed, '^delayed') then return {'delayed', false, result, 0} end
return {'waiting', false, result, 0}
