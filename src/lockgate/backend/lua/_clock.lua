-- _clock.lua: a fragment, not a script. Included (--#include _clock) where a script needs
-- the time: the server's clock (TIME), so that every worker and producer agrees on due
-- times, leases and ages whatever their own clocks say.
-- now_us(): microseconds since the epoch; now_ms(): milliseconds, rounded down.
-- Read once per script call (a call that settles or claims a batch of jobs asks TIME
-- once, not once per job): within one call the time stands still, as Redis itself holds
-- it still for key expiry while a script runs. In the library (see library.py) the clock
-- is one for the whole call, also when one script runs another's body (settle_many runs
-- settle_stream's once per ending): the function's entry resets it.
local clock_us -- per call; in the library, shared by the bodies one call runs
local function now_us()
  if not clock_us then
    local t = redis.call('TIME')
    clock_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return clock_us
end
local function now_ms()
  return math.floor(now_us() / 1000)
end
