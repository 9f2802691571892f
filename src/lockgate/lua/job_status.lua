-- job_status.lua: where a job is and what it is, in one read.
-- KEYS: [1] the job's marker, [2] its result key, [3] its status key
-- ARGV: [1] the streams' consumer group
-- Reads (KEYS not passed, all in the namespace's slot): the stream, delayed set or sorted
-- sets the marker names (see _marker.lua).
-- Returns: {state, data, result record or false, extra}:
--   'unknown', false            never enqueued, or its final record expired
--   'final', record             ended; record is the worker's JSON (status, times...)
-- (the marker first: a job enqueued again under the id of one that ended is that job)
--   'waiting', payload          in its stream or sorted set, not taken
--   'running', payload, deliveries   taken by a worker (pending entry, or in flight)
--   'delayed', payload, due ms  waiting for its due time ('waiting' once due)
--   'waiting'/'delayed', false  a marker lockgate 0.2 wrote (no place in it)
--#include _clock
--#include _marker
local marker, group = KEYS[1], ARGV[1]
local result = redis.call('GET', KEYS[2])
local placed = redis.call('GET', marker)
if not placed then
  local record = redis.call('GET', KEYS[3])
  if record then return {'final', record, result, 0} end
  return {'unknown', false, result, 0}
end
local prefix, job_id = string.match(marker, '^(.-):job:(.*)$')

local function id_of(payload)
  local ok, decoded = pcall(cjson.decode, payload)
  return ok and type(decoded) == 'table' and decoded.id or nil
end

local entry, place = string.match(placed, '^(%d+%-%d+) (.+)$')
if entry then
  local stream = prefix .. ':stream:' .. place
  local found = redis.call('XRANGE', stream, entry, entry)
  if #found == 0 then return {'unknown', false, result, 0} end
  local fields, payload = found[1][2], false
  for i = 1, #fields, 2 do
    if fields[i] == 'job' then payload = fields[i + 1] end
  end
  local row = redis.pcall('XPENDING', stream, group, entry, entry, 1)
  if type(row) == 'table' and not row.err and #row == 1 then
    return {'running', payload, result, row[1][4]}
  end
  return {'waiting', payload, result, 0}
end
local due, delayed_place = string.match(placed, '^delayed (%d+) (.+)$')
if due then
  local members = redis.call('ZRANGEBYSCORE', prefix .. ':delayed:' .. delayed_place, due, due)
  for _, payload in ipairs(members) do
    if id_of(payload) == job_id then
      if tonumber(due) <= now_ms() then return {'waiting', payload, result, 0} end
      return {'delayed', payload, result, tonumber(due)}
    end
  end
  return {'unknown', false, result, 0}
end
local queue = string.match(placed, '^sorted (.+)$')
if queue then
  local base = prefix .. ':sorted:' .. queue .. ':'
  local payload = redis.call('HGET', base .. 'payloads', job_id)
  if not payload then return {'unknown', false, result, 0} end
  if redis.call('ZSCORE', base .. 'inflight', job_id) then
    return {'running', payload, result, tonumber(redis.call('HGET', base .. 'deliveries', job_id) or '1')}
  end
  local due_at = redis.call('ZSCORE', base .. 'delayed', job_id)
  if due_at and tonumber(due_at) > now_ms() then
    return {'delayed', payload, result, tonumber(due_at)}
  end
  return {'waiting', payload, result, 0}
end
if string.match(placed, '^delayed') then return {'delayed', false, result, 0} end
return {'waiting', false, result, 0}
