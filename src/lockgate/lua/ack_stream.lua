-- ack_stream.lua: finish jobs of one stream: acknowledge, delete, and free their job ids.
-- KEYS: KEYS[1] = the stream, KEYS[1 + i] = job marker of entry i
-- ARGV: ARGV[1] = group, ARGV[1 + i] = entry id i
-- Touches: per entry, XACK; only when that acknowledged it (it was still pending, not
--          already finished by a worker that reclaimed it) XDEL (memory stays flat) and DEL
--          of the marker, so a late ack can never free the id of a newer job.
-- Returns: the number of entries acknowledged.
local stream, group = KEYS[1], ARGV[1]
local acked = 0
for i = 2, #ARGV do
  if redis.call('XACK', stream, group, ARGV[i]) == 1 then
    redis.call('XDEL', stream, ARGV[i])
    redis.call('DEL', KEYS[i])
    acked = acked + 1
  end
end
return acked
