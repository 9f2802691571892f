-- reclaim_stream.lua: take over one entry that a worker left pending too long (it died,
-- or hangs without a heartbeat) and report how often it has been delivered.
-- KEYS: the streams, tried in order
-- ARGV: group, consumer, min idle ms
-- Touches: XAUTOCLAIM with COUNT 1 (Redis 7: entries deleted while pending are dropped
--          from the PEL and reported); XPENDING for the delivery count. One at a time:
--          a reclaimed job runs alone, so if it kills its worker again no neighbour's
--          delivery count goes up with it.
-- Returns: {key index or 0, entry id, fields, delivery count, number of deleted ids dropped}
local dropped = 0
for k = 1, #KEYS do
  local reply = redis.pcall('XAUTOCLAIM', KEYS[k], ARGV[1], ARGV[2], ARGV[3], '0-0', 'COUNT', 1)
  if type(reply) == 'table' and reply.err then
    if not string.find(reply.err, 'NOGROUP', 1, true) then return redis.error_reply(reply.err) end
  else
    dropped = dropped + #(reply[3] or {})
    local claimed = reply[2]
    if #claimed > 0 then
      local id, fields = claimed[1][1], claimed[1][2]
      local pending = redis.call('XPENDING', KEYS[k], ARGV[1], id, id, 1)
      local count = 0
      if #pending == 1 then count = pending[1][4] end
      return {k, id, fields, count, dropped}
    end
  end
end
return {0, '', {}, 0, dropped}
