-- _dead_letter.lua: a fragment, not a script. Included (--#include _dead_letter) by
-- settle_stream.lua and settle_sorted.lua.
-- add_dead_letter(dead, max_len, max_age_ms, first) XADDs ARGV[first..] (field/value
-- pairs) to the dead-letter stream, trimmed to about max_len entries (MAXLEN ~) and to
-- entries younger than max_age_ms on the server's clock (XTRIM MINID ~); 0: no limit.
local function add_dead_letter(dead, max_len, max_age, first)
  local fields = {}
  for i = first, #ARGV do fields[#fields + 1] = ARGV[i] end
  if tonumber(max_len) > 0 then
    redis.call('XADD', dead, 'MAXLEN', '~', max_len, '*', unpack(fields))
  else
    redis.call('XADD', dead, '*', unpack(fields))
  end
  if tonumber(max_age) > 0 then
    local t = redis.call('TIME')
    local oldest = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - max_age
    redis.call('XTRIM', dead, 'MINID', '~', string.format('%.0f', oldest))
  end
end
