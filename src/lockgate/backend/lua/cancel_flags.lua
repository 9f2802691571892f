-- cancel_flags.lua: the cancel flags of the jobs a worker runs, in one read (a script, so
-- that a worker needs no command beyond GET: MGET is not on the documented ACL list).
-- KEYS: the jobs' cancel flags (Keys.cancel_flag)
-- ARGV: none
-- Returns: per flag, the take it names (see cancel_job.lua), or '' when none is set.
local out = {}
for i = 1, #KEYS do
  out[i] = redis.call('GET', KEYS[i]) or ''
end
return out
