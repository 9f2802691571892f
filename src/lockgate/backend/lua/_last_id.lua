-- _last_id.lua: a fragment, not a script. Included (--#include _last_id) by scripts that
-- hand an idle worker the ids to block on with XREAD.
-- last_id(stream): the stream's last generated id ('0-0' while it does not exist), from
-- which a blocking XREAD returns only entries added later: entries already delivered (or
-- deleted, or trimmed) never wake it.
local function last_id(stream)
  if redis.call('EXISTS', stream) == 0 then return '0-0' end
  local info = redis.call('XINFO', 'STREAM', stream)
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then return info[i + 1] end
  end
  return '0-0'
end
