-- purge_stream.lua: delete one chunk of a stream's waiting jobs (a purge reads the next
-- entries after the group's last-delivered id, then calls this for them, up to a thousand
-- at a time, so Redis is never blocked by one long call).
-- KEYS: the stream (or a fairness key's stream of waiting jobs, Keys.fair_jobs, which
--       has no group: all of it waits, and the key leaves its rotation once it is empty,
--       see _fair.lua), the final records' index (Keys.statuses), then three keys of each
--       entry's job, one triple per entry in ARGV: its marker (Keys.job), its status key
--       as lockgate 0.3 kept it and its result key (Keys.status, Keys.result: an earlier
--       job's records under the same id must not answer for this one); for an entry
--       whose job id cannot be read, those of the id '' (no marker names that entry, so
--       none is deleted)
-- ARGV: group, then per entry: its id, its job id, the job id's status shard
-- Touches: XINFO GROUPS; XDEL of each entry the group has not delivered yet (an id after
--          its last-delivered id: a worker's read between the caller's XRANGE and this call
--          made the entries it took pending, and those stay); DEL of the entry's marker
--          when it still names that entry (see _marker.lua), which frees the job id, and of
--          its result key and final records (see _status.lua); a job of a flow cancels its
--          flow (see _flow.lua). Running
--          (pending) entries, the delayed set and the stream key itself (its group) stay.
-- Returns: how many entries were deleted.

--#include _status
--#include _entry_ids
--#include _fair
--#include _flow
local stream, group = KEYS[1], ARGV[1]
local groups = redis.pcall('XINFO', 'GROUPS', stream)
if groups.err then return 0 end -- no stream: nothing waits
local delivered = '0-0' -- no group yet: no worker read the stream, every entry waits
for _, row in ipairs(groups) do
  local info = {}
  for i = 1, #row, 2 do info[row[i]] = row[i + 1] end
  if info['name'] == group then delivered = info['last-delivered-id'] end
end
local deleted = 0
for a = 2, #ARGV, 3 do
  local entry, k = ARGV[a], a + 1
  local found = later(entry, delivered) and redis.call('XRANGE', stream, entry, entry)[1]
  if found and redis.call('XDEL', stream, entry) == 1 then
    deleted = deleted + 1
    local placed = redis.call('GET', KEYS[k])
    if placed and (placed == entry or string.sub(placed, 1, #entry + 1) == entry .. ' '
        or string.sub(placed, 1, #entry + 6) == 'fair ' .. entry .. ' ') then
      redis.call('DEL', KEYS[k], KEYS[k + 1], KEYS[k + 2])
      forget_status(KEYS[2], ARGV[a + 1], ARGV[a + 2])
      local payload = found[2][2]
      if in_flow(payload) then flow_lib().job_removed(KEYS[k], ARGV[a + 1], payload) end
    end
  end
end
if is_lane(stream) then fair_forget(stream) end
return deleted
