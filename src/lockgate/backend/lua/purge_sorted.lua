-- purge_sorted.lua: delete one chunk of a sorted-backend queue's waiting jobs (a purge
-- scans waiting, then calls this for the jobs it picked, up to a thousand at a time, so
-- Redis is never blocked by one long call).
-- KEYS: waiting, payloads, ranks, deliveries, owners, the final records' index
--       (Keys.statuses), then three keys of each job in ARGV: its marker (Keys.job), its
--       status key as lockgate 0.3 kept it and its result key (Keys.status, Keys.result)
-- ARGV: per job: its id, its status shard (Keys.status_shard)
-- Touches: ZREM of each job from waiting or its key's lane (see _fair_sorted.lua); for
--          each one that was still there (a worker's
--          take between the caller's scan and this call moved the jobs it took to
--          inflight, and those stay): HDEL of its payload, rank, delivery count and owner
--          token, and DEL of its marker (which frees the job id), of its result key and
--          of its final records (an earlier job's under the id must not answer for it); a
--          job of a flow cancels its flow (see _flow.lua). Jobs in
--          flight or delayed
--          stay.
-- Returns: how many jobs were deleted.
--#include _status
--#include _clock
--#include _fair_sorted
--#include _flow
local deleted = 0
for a = 1, #ARGV, 2 do
  local id, k = ARGV[a], 3 * (a + 1) / 2 + 4 -- the job's triple of keys
  local payload = redis.call('HGET', KEYS[2], id)
  local head = redis.call('ZREM', KEYS[1], id) == 1
  -- A key's head goes, and its next job waits in its place (see _fair_sorted.lua).
  if head then sorted_promote(KEYS[1], id, payload, now_us()) end
  if head or sorted_unlane(KEYS[1], id, payload) or sorted_unpark(KEYS[1], id, payload) then
    deleted = deleted + 1
    for h = 2, 5 do redis.call('HDEL', KEYS[h], id) end
    redis.call('DEL', KEYS[k], KEYS[k + 1], KEYS[k + 2])
    forget_status(KEYS[6], id, ARGV[a + 1])
    if in_flow(payload) then flow_lib().job_removed(KEYS[k], id, payload) end
  end
end
return deleted
