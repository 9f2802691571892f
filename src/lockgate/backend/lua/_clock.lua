-- _clock.lua: a fragment, not a script. Included (--#include _clock) where a script needs
-- the time: the server's clock (TIME), so that every worker and producer agrees on due
-- times, leases and ages whatever their own clocks say.
-- now_us(): microseconds since the epoch; now_ms(): milliseconds, rounded down.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function now_ms()
  return math.floor(now_us() / 1000)
end
