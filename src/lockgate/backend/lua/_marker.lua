-- _marker.lua: a fragment, not a script. Included (--#include _marker) by the scripts that
-- write a job's marker (KEYS: Keys.job), the string that says where a job is, from its
-- enqueue to its end (it holds the id: enqueue refuses a second job under it), so that
-- its status costs no write of its own on the hot path:
--   '<entry id> <queue>:<level>'          streams: in that stream (waiting, or running
--                                         while the entry is pending)
--   'delayed <due ms> <queue>:<level>'    streams: in that stream's delayed set
--   'sorted <queue>'                      sorted backend: in that queue's sets
-- lockgate 0.2 wrote a bare entry id or 'delayed' (still read as such). When the job
-- ends the marker goes, as in 0.2 (so 0.2 producers in a rolling deploy see the id free),
-- and its final record (written by the worker, see status.final_record) is kept instead for
-- App(status_ttl=...), in a window's hash (see _status.lua).
-- place_of(stream): '<queue>:<level>' of a stream key (Keys.stream; '<queue>:<level>+' of a
-- keyed jobs' delivery stream, Keys.fair_stream).
-- level_place_of(stream): '<queue>:<level>' of either (where a delayed marker points).
-- queue_of(key): '<queue>' of a sorted-backend key (Keys.sorted_*).
-- mark_end(marker, index, id, shard, record, ttl_ms): the marker goes, and the final
-- record is kept for ttl_ms (none for a record of '' or a TTL of 0; see keep_status).
-- take_once(key, ttl_ms): claim a once-only key (a cron tick) for ttl_ms; true when this
-- call took it, or when there is none to take (key '' or TTL 0).
--#include _status
local function place_of(stream)
  return string.match(stream, ':stream:(.+)$') or ''
end
local function level_place_of(stream)
  return (string.gsub(place_of(stream), '%+$', ''))
end
local function queue_of(key)
  return string.match(key, ':sorted:(.+):[^:]+$') or ''
end
local function mark_end(marker, index, id, shard, record, ttl_ms)
  redis.call('DEL', marker)
  if record ~= '' and tonumber(ttl_ms) > 0 then keep_status(index, id, shard, record, ttl_ms) end
end
local function take_once(key, ttl_ms)
  if key == '' or tonumber(ttl_ms) <= 0 then return true end
  return redis.call('SET', key, '1', 'NX', 'PX', ttl_ms) ~= false
end
