-- ack_stream.lua: finish jobs of one stream: acknowledge, delete, and free their job ids.
-- KEYS: KEYS[1] = the stream, KEYS[1 + i] = job marker of entry i
-- ARGV: ARGV[1] = group, ARGV[1 + i] = entry id i
-- Touches: XACK and XDEL on the stream (deleting keeps memory flat); DEL of each marker
--          only while it still names this entry (compare-and-delete).
-- Returns: the number of entries acknowledged.
local stream, group = KEYS[1], ARGV[1]
local ids = {}
for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
local acked = redis.call('XACK', stream, group, unpack(ids))
redis.call('XDEL', stream, unpack(ids))
for i = 2, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i] then redis.call('DEL', KEYS[i]) end
end
return acked
