-- idem_mark_done.lua: refill a done marker from the source of truth (PostgreSQL said the
-- key is claimed there) so the next duplicate is stopped by Redis alone.
-- KEYS: the claim key
-- ARGV: TTL in ms
-- Touches: SET of 'd:refill' with the TTL, unless a live claim holds the key.
-- Returns: 1 when written.
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, 2) == 'c:' then return 0 end
redis.call('SET', KEYS[1], 'd:refill', 'PX', ARGV[1])
return 1
