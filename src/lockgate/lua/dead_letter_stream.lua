-- dead_letter_stream.lua: move a job that will not succeed to the dead-letter stream.
-- KEYS: the stream, the dead-letter stream, the job's marker (absent when the entry was
--       undecodable and its job id unknown)
-- ARGV: group, entry id, then field/value pairs of the dead-letter entry
-- Touches: XACK + XDEL of the entry, XADD to the dead-letter stream, DEL of the marker (a
--          replay re-enqueues the job under the same id). Nothing happens when the entry
--          was no longer pending.
-- Returns: the dead-letter entry id, or 0 when the entry was not pending.
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('XDEL', KEYS[1], ARGV[2])
local fields = {}
for i = 3, #ARGV do fields[#fields + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[2], '*', unpack(fields))
if KEYS[3] then redis.call('DEL', KEYS[3]) end
return id
