-- forget_consumers.lua: remove consumers that are gone: they own no pending entry and
-- have not been heard from for a while (workers that exited or were killed and reclaimed).
-- KEYS: the streams
-- ARGV: group, min idle ms, the calling consumer (never removed)
-- Touches: XINFO CONSUMERS and XGROUP DELCONSUMER (safe: only consumers with nothing pending).
-- Returns: how many consumers were removed.
local removed = 0
for k = 1, #KEYS do
  local consumers = redis.pcall('XINFO', 'CONSUMERS', KEYS[k], ARGV[1])
  if type(consumers) == 'table' and not consumers.err then
    for _, row in ipairs(consumers) do
      local info = {}
      for i = 1, #row, 2 do info[row[i]] = row[i + 1] end
      if info['pending'] == 0 and info['idle'] > tonumber(ARGV[2]) and info['name'] ~= ARGV[3] then
        redis.call('XGROUP', 'DELCONSUMER', KEYS[k], ARGV[1], info['name'])
        removed = removed + 1
      end
    end
  end
end
return removed
