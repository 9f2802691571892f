-- leave_worker.lua: a worker's clean stop: off the registry, with its last activity
-- counts, on the server's clock (TIME).
-- KEYS: [1] the worker's entry (Keys.worker), [2] the registry's index (Keys.workers),
--       then 3 candidate activity keys per batch of counts (Keys.activity; see _activity)
-- ARGV: [1] the worker's name, [2] how long an activity minute is kept after it ends
--       (ms), then the counts from ARGV[3] on (see _activity)
-- Touches: DELs the entry, ZREMs the name from the index; adds the counts (ZADD INCR,
--          PEXPIREAT).
-- Returns: {now in ms, then the numbers of the batches not added (see _activity)}.
--#include _clock
--#include _activity
local now = now_ms()
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
local unplaced = add_activity(KEYS, ARGV, 3, 3, now, tonumber(ARGV[2]))
return {now, unpack(unplaced)}
