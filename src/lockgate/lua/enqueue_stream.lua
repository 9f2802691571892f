-- enqueue_stream.lua: add jobs to their streams unless their job id is already queued or running.
-- KEYS: for job i, KEYS[2i-1] = job marker, KEYS[2i] = the job's stream
-- ARGV: for job i, ARGV[i] = encoded job
-- Touches: the markers (SET) and the streams (XADD, field "job"); nothing is trimmed.
-- Returns: for job i, its stream entry id, or 0 when the id was taken (a duplicate).
local out = {}
for i = 1, #ARGV do
  local marker, stream = KEYS[2 * i - 1], KEYS[2 * i]
  if redis.call('EXISTS', marker) == 1 then
    out[i] = 0
  else
    local id = redis.call('XADD', stream, '*', 'job', ARGV[i])
    redis.call('SET', marker, id)
    out[i] = id
  end
end
return out
