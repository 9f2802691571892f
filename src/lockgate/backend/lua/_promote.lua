-- _promote.lua: a fragment, not a script. Included (--#include _promote) by read_stream.lua
-- and peek_stream.lua, which move due delayed jobs (retries, delayed enqueues) into their
-- streams before they look at the streams.
-- promote(n): for k = 1..n, moves the jobs of delayed set KEYS[n + k] that are due by the
-- server's clock (at most 1,000 per set per call; one ZRANGE when none is) into stream
-- KEYS[k] (a job with a fairness key into its key's stream, see _fair.lua), pointing each
-- moved job's marker at its new entry; under maxmemory an XADD refused stops that set's move
-- (the jobs stay delayed: draining frees memory). Returns ms until the next delayed job
-- is due, -1 when none is.
--#include _clock
--#include _marker
--#include _fair
-- The marker of a job moved from a delayed set to ``stream`` as ``entry`` points there
-- (only while it still says delayed). The one key no caller passes: which jobs fall due is
-- known only here. Its name (Keys.job) is built from the stream key's own prefix, so it
-- carries the namespace's hash tag and lies in the slot this call was routed to.
local function point_marker(stream, job, entry)
  local ok, decoded = pcall(cjson.decode, job)
  if not ok or type(decoded) ~= 'table' or type(decoded.id) ~= 'string' then return end
  local marker = string.match(stream, '^(.-):stream:') .. ':job:' .. decoded.id
  local placed = redis.call('GET', marker)
  if placed and string.match(placed, '^delayed') then
    redis.call('SET', marker, entry .. ' ' .. place_of(stream))
  end
end

local function promote(n)
  local now = now_ms()
  local next_due = -1
  for k = 1, n do
    local delayed = KEYS[n + k]
    local first = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
    if #first == 2 and tonumber(first[2]) <= now then  -- something is due: move it
      local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, 1000)
      local moved = {}
      for _, job in ipairs(due) do
        local jobs, marker = fair_route(KEYS[k], job)
        if jobs then
          if not pcall(fair_add, jobs, job, marker) then break end
        else
          local added = redis.pcall('XADD', KEYS[k], '*', 'job', job)
          if type(added) == 'table' and added.err then break end
          point_marker(KEYS[k], job, added)
        end
        moved[#moved + 1] = job
      end
      if #moved > 0 then redis.call('ZREM', delayed, unpack(moved)) end
      first = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
    end
    if #first == 2 then
      local wait = math.max(0, tonumber(first[2]) - now)
      if next_due < 0 or wait < next_due then next_due = wait end
    end
  end
  return next_due
end

