-- heartbeat_stream.lua: reset the idle time of entries a worker is still running, so no
-- other worker reclaims them.
-- KEYS: the stream
-- ARGV: group, consumer, then entry ids
-- Touches: XCLAIM ... JUSTID (does not count a delivery) of each entry, only while the
--          consumer still owns it: a job already reclaimed elsewhere is not taken back.
-- Returns: how many entries were kept.
local kept = 0
for i = 3, #ARGV do
  local row = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if row.err then row = {} end  -- the stream or group is gone: nothing to keep
  if #row == 1 and row[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
    kept = kept + 1
  end
end
return kept
