-- fair_keys.lua: the fairness keys of some queues and levels with jobs waiting or
-- running, for `lockgate stats`. Read-only (see _fair.lua for the layout).
-- KEYS: [1] the first queue and level's rotation (Keys.fair_rotation; the call's slot)
-- ARGV: [1] the key prefix ('lockgate:{tag}'), [2] the most keys read per level, then
--       the places '<queue>:<level>'
-- Touches: nothing (ZRANGE, XLEN, XRANGE of at most 10,000 running entries per level).
-- Returns: per place, in order: a flat list {key, waiting, running task, count, ...,
--          ''} per key with jobs waiting (its lanes' lengths, whatever their task) or
--          running (the delivery stream's entries, per task); '' ends a key's tasks.
--#include _job_names
local prefix, most = ARGV[1], tonumber(ARGV[2])
local out = {}
for a = 3, #ARGV do
  local place = ARGV[a]
  local rotation = prefix .. ':fair:' .. place
  local waiting, running, order = {}, {}, {}
  for _, lane in ipairs(redis.call('ZRANGE', rotation, 0, most)) do
    if lane ~= '' then  -- '=<key>' or '<task>=<key>' (see _fair.lua)
      local key = string.sub(lane, string.find(lane, '=', 1, true) + 1)
      if not waiting[key] then order[#order + 1] = key end
      waiting[key] = (waiting[key] or 0) + redis.call('XLEN', rotation .. ':' .. lane)
    end
  end
  local delivered = redis.call('XRANGE', prefix .. ':stream:' .. place .. '+', '-', '+',
    'COUNT', 10000)
  for _, entry in ipairs(delivered) do
    local job = entry[2][2]
    local ok, decoded = pcall(cjson.decode, job)
    if ok and type(decoded) == 'table' and type(decoded.key) == 'string' then
      local key, task = decoded.key, tostring(decoded.task)
      if not running[key] then
        running[key] = {}
        if not waiting[key] then order[#order + 1] = key end
      end
      running[key][task] = (running[key][task] or 0) + 1
    end
  end
  local rows = {}
  for _, key in ipairs(order) do
    rows[#rows + 1] = key
    rows[#rows + 1] = waiting[key] or 0
    for task, count in pairs(running[key] or {}) do
      rows[#rows + 1] = task
      rows[#rows + 1] = count
    end
    rows[#rows + 1] = ''
  end
  out[#out + 1] = rows
end
return out
