-- dlq_purge.lua: delete one chunk of the oldest dead letters (a purge calls it until a
-- chunk comes back short, so Redis is never blocked by one huge DEL).
-- KEYS: the dead-letter stream
-- ARGV: chunk size (at most a few thousand: the ids are unpacked onto the Lua stack),
--       the newest entry id to delete ('+' for any; letters added after a purge started
--       are not its business)
-- Touches: XRANGE + XDEL of up to ARGV[1] entries; DEL of the stream once it is empty.
-- Returns: how many entries were deleted.
local entries = redis.call('XRANGE', KEYS[1], '-', ARGV[2], 'COUNT', ARGV[1])
if #entries == 0 then return 0 end
local ids = {}
for i, entry in ipairs(entries) do ids[i] = entry[1] end
local deleted = redis.call('XDEL', KEYS[1], unpack(ids))
if redis.call('XLEN', KEYS[1]) == 0 then redis.call('DEL', KEYS[1]) end
return deleted
