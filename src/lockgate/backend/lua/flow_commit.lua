-- flow_commit.lua: make a staged flow live in one step (its stage's keys renamed to the
-- flow's), then queue its first jobs, at most ARGV[4] of them (flow_release.lua queues
-- the rest; until then the flow is listed in the releasing set, where workers finish
-- what a producer that died left).
-- KEYS: [1] the flow's record (Keys.flow), [2] the stage (Keys.flow_stage), [3] the
--       releasing set (Keys.flows_releasing)
-- ARGV: [1] the flow's id, [2] its job count, [3] flow_ttl ms, [4] jobs to queue at most
--       in this call, [5] the flow's shape (JSON), [6] the stage's token, [7] its jobs'
--       tasks (JSON list, by position)
-- Touches: the stage's keys (RENAME, PERSIST; DEL when the flow exists), the record
--          (HSET), the jobs queued (see _flow.lua), the releasing set (ZADD).
-- Returns: {1 created here (also when this call is a retry of the one that did), 0 the
--          flow existed; how many of its first jobs are left to queue; -1 instead when
--          the stage expired before the commit}
--#include _clock
--#include _flow
local base, stage = KEYS[1], KEYS[2]
local parts = {'held', 'wait', 'parents', 'children', 'roots'}
redis.call('DEL', stage .. ':chunks')
if redis.call('EXISTS', base) == 1 then
  for _, part in ipairs(parts) do redis.call('DEL', stage .. ':' .. part) end
  local ours = redis.call('HGET', base, 'token') == ARGV[6]
  return {ours and 1 or 0, redis.call('LLEN', base .. ':roots')}
end
if redis.call('EXISTS', stage .. ':roots') == 0 then return {0, -1} end
for _, part in ipairs(parts) do
  if redis.call('EXISTS', stage .. ':' .. part) == 1 then
    redis.call('RENAME', stage .. ':' .. part, base .. ':' .. part)
    redis.call('PERSIST', base .. ':' .. part)
  end
end
redis.call('HSET', base, 'total', ARGV[2], 'left', ARGV[2], 'ttl', ARGV[3], 'shape', ARGV[5], 'token', ARGV[6],
  'tasks', ARGV[7], 'created', string.format('%.0f', now_ms()))
local flow = flow_lib()
for _, record in ipairs(redis.call('LPOP', base .. ':roots', ARGV[4]) or {}) do
  flow.queue(record)
end
local left = redis.call('LLEN', base .. ':roots')
if left > 0 then redis.call('ZADD', KEYS[3], string.format('%.0f', now_ms()), ARGV[1]) end
return {1, left}
