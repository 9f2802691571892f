-- heartbeat_worker.lua: a worker's heartbeat in the registry, and its activity counts, on
-- the server's clock (TIME), so a worker whose clock is wrong neither hides the others
-- nor loses its counts.
-- KEYS: [1] the worker's entry (Keys.worker), [2] the registry's index (Keys.workers),
--       then 3 candidate activity keys per batch of counts (Keys.activity; see _activity)
-- ARGV: [1] the worker's name, [2] its entry: a JSON object of at least one field, without
--       started_at and last_heartbeat, [3] how long ago it started (ms, its own clock),
--       [4] the entry's lifetime (ms), [5] how long after its expiry a name is swept from
--       the index (ms), [6] how long an activity minute is kept after it ends (ms), then
--       the counts from ARGV[7] on (see _activity)
-- Touches: SETs the entry with started_at (now - ARGV[3]) and last_heartbeat (now), in
--          Unix seconds, to expire after ARGV[4] ms; ZADDs the name to the index scored
--          by that expiry (Unix s) and removes the names scored more than ARGV[5] ms
--          ago; the index expires ARGV[5] ms after this heartbeat's entry would. Adds the
--          counts (ZADD INCR, PEXPIREAT).
-- Returns: {now in ms, then the numbers of the batches not added (see _activity)}.
--#include _clock
--#include _activity
local now = now_ms()
local lifetime, sweep = tonumber(ARGV[4]), tonumber(ARGV[5])
local times = string.format(',"started_at":%.3f,"last_heartbeat":%.3f}',
  (now - tonumber(ARGV[3])) / 1000, now / 1000)
redis.call('SET', KEYS[1], string.sub(ARGV[2], 1, -2) .. times, 'PX', lifetime)
redis.call('ZADD', KEYS[2], (now + lifetime) / 1000, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', (now - sweep) / 1000)
redis.call('PEXPIREAT', KEYS[2], now + lifetime + sweep)
local unplaced = add_activity(KEYS, ARGV, 3, 7, now, tonumber(ARGV[6]))
return {now, unpack(unplaced)}
