-- dead_letter_sorted.lua: move a sorted-backend job that will not succeed to the
-- dead-letter stream.
-- KEYS: inflight, payloads, ranks, deliveries, the dead-letter stream, the job's marker
-- ARGV: job id, then field/value pairs of the dead-letter entry
-- Touches: ZREM inflight, HDEL payloads/ranks/deliveries, XADD dead, DEL marker. Nothing
--          happens when the job was no longer in flight.
-- Returns: the dead-letter entry id, or 0 when the job was not in flight.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
for k = 2, 4 do redis.call('HDEL', KEYS[k], ARGV[1]) end
local fields = {}
for i = 2, #ARGV do fields[#fields + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[5], '*', unpack(fields))
redis.call('DEL', KEYS[6])
return id
