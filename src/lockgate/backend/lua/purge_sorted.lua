-- purge_sorted.lua: delete one chunk of a sorted-backend queue's waiting jobs (a purge
-- scans waiting, then calls this for the jobs it picked, up to a thousand at a time, so
-- Redis is never blocked by one long call).
-- KEYS: waiting, payloads, ranks, deliveries, owners, then three keys of each job id in
--       ARGV: its marker (Keys.job), status and result keys (Keys.status, Keys.result)
-- ARGV: the job ids (one per marker key)
-- Touches: ZREM of each job from waiting; for each one that was still there (a worker's
--          take between the caller's scan and this call moved the jobs it took to
--          inflight, and those stay): HDEL of its payload, rank, delivery count and owner
--          token, and DEL of its marker (which frees the job id) and of its status and
--          result keys (an earlier job's under the id must not answer for it). Jobs in
--          flight or delayed
--          stay.
-- Returns: how many jobs were deleted.
local deleted = 0
for i = 1, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', KEYS[1], id) == 1 then
    deleted = deleted + 1
    for k = 2, 5 do redis.call('HDEL', KEYS[k], id) end
    redis.call('DEL', KEYS[3 * i + 3], KEYS[3 * i + 4], KEYS[3 * i + 5])
  end
end
return deleted
