-- dlq_trim.lua: trim the dead-letter stream to a maximum length and age.
-- KEYS: the dead-letter stream
-- ARGV: max entries (0: no limit), max age in ms by the server's clock (0: no limit)
-- Touches: XTRIM MAXLEN ~ then XTRIM MINID ~. Approximate trimming removes whole stream
--          nodes only (so up to a node's worth of entries past a limit may stay), and at
--          most XTRIM's default LIMIT per call (100 nodes): the caller repeats until a
--          call removes nothing, and Redis is never blocked by one huge trim.
-- Returns: how many entries were removed.
local removed = 0
local max_len = tonumber(ARGV[1])
local max_age = tonumber(ARGV[2])
if max_len > 0 then
  removed = removed + redis.call('XTRIM', KEYS[1], 'MAXLEN', '~', max_len)
end
if max_age > 0 then
  local now = redis.call('TIME')
  local cutoff = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - max_age
  if cutoff > 0 then
    removed = removed + redis.call('XTRIM', KEYS[1], 'MINID', '~', string.format('%.0f', cutoff))
  end
end
return removed
