-- _dead_letter.lua: a fragment, not a script. Included (--#include _dead_letter) by
-- settle_stream.lua, settle_sorted.lua and dlq_trim.lua.
-- trim_dead(dead, max_len, max_age_ms) trims the dead-letter stream to about max_len
-- entries (XTRIM MAXLEN ~) and to entries younger than max_age_ms on the server's clock
-- (XTRIM MINID ~); 0: no limit. Approximate trimming removes whole stream nodes only, at
-- most XTRIM's default LIMIT (100 nodes) per call, so one call never blocks Redis long.
-- Returns how many entries it removed.
-- add_dead_letter(dead, max_len, max_age_ms, first) XADDs ARGV[first..] (field/value
-- pairs) to the dead-letter stream, then trims it.
--#include _clock
local function trim_dead(dead, max_len, max_age)
  local removed = 0
  if tonumber(max_len) > 0 then
    removed = removed + redis.call('XTRIM', dead, 'MAXLEN', '~', max_len)
  end
  local oldest = now_ms() - tonumber(max_age)
  if tonumber(max_age) > 0 and oldest > 0 then
    removed = removed + redis.call('XTRIM', dead, 'MINID', '~', string.format('%.0f', oldest))
  end
  return removed
end
local function add_dead_letter(dead, max_len, max_age, first)
  local fields = {}
  for i = first, #ARGV do fields[#fields + 1] = ARGV[i] end
  redis.call('XADD', dead, '*', unpack(fields))
  trim_dead(dead, max_len, max_age)
end
