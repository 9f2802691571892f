-- _activity.lua: a fragment, not a script. Included (--#include _activity) by the scripts
-- of the worker registry, which add a worker's activity counts on the server's clock.
-- add_activity(keys, argv, first_key, at, now, keep): adds the counts that ARGV holds from
-- argv[at] on: n, then per batch of counts (one of the worker's minutes) the first of its
-- candidate minutes, its age (ms before now that its counts ended, at the latest, on the
-- worker's own clock: a duration, so the worker's clock error drops out), k, then k pairs
-- of counter name and amount. The batch goes to the minute the server's clock was in
-- then: floor((now - age) / 60000), which must be one of its 3 candidates, whose keys are
-- keys[first_key + 3 * (batch - 1) + 0..2] (activity keys of the candidate minute, the
-- next, the one after). Each key touched is kept until keep ms after its minute ends.
-- Returns the numbers (from 1) of the batches none of whose candidates was the minute,
-- which it did not add (the worker's guess of the server's clock was off by a minute).
local function add_activity(keys, argv, first_key, at, now, keep)
  local unplaced = {}
  local n = tonumber(argv[at])
  at = at + 1
  for batch = 1, n do
    local first, age, k = tonumber(argv[at]), tonumber(argv[at + 1]), tonumber(argv[at + 2])
    at = at + 3
    local minute = math.floor((now - age) / 60000)
    local pick = minute - first
    if pick >= 0 and pick <= 2 then
      local key = keys[first_key + 3 * (batch - 1) + pick]
      for c = 0, k - 1 do
        redis.call('ZADD', key, 'INCR', argv[at + 2 * c + 1], argv[at + 2 * c])
      end
      redis.call('PEXPIREAT', key, (minute + 1) * 60000 + keep)
    else
      unplaced[#unplaced + 1] = batch
    end
    at = at + 2 * k
  end
  return unplaced
end
