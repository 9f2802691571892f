-- flow_cancel.lua: cancel a flow's jobs that were never queued, and mark it cancelled
-- (its queued jobs are cancelled one by one by the caller, with cancel_job.lua).
-- KEYS: [1] the flow's record (Keys.flow), [2] the releasing set (Keys.flows_releasing)
-- ARGV: [1] the flow's id
-- Touches: the flow's held jobs, barriers and roots (DEL), its record (HSET cancelled),
--          every key of it (PEXPIRE flow_ttl), the releasing set (ZREM).
-- Returns: how many held jobs it dropped; -1 when there is no such flow; 0 for a flow
-- whose jobs all succeeded (it stays done).
--#include _flow
local base = KEYS[1]
local left = redis.call('HGET', base, 'left')
if not left then return -1 end
if tonumber(left) <= 0 then return 0 end
local flow = flow_lib()
local dropped = flow.drop_held(base)
redis.call('HSET', base, 'cancelled', '1')
redis.call('ZREM', KEYS[2], ARGV[1])
flow.expire(base, redis.call('HGET', base, 'ttl'))
return dropped
