-- progress_read.lua: the progress of several jobs, in one read (a script, so that a
-- reader needs no command beyond GET: MGET is not on the documented ACL list).
-- KEYS: the jobs' progress keys (Keys.progress)
-- ARGV: none
-- Returns: per key, its value (the JSON [value, note]), or false when none is kept.
local out = {}
for i = 1, #KEYS do
  out[i] = redis.call('GET', KEYS[i])
end
return out
