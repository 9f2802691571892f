-- flow_stage.lua: stage a chunk of a flow's jobs before its commit (flow_commit.lua):
-- nothing is queued and nothing of a live flow is touched.
-- KEYS: [1] the flow's record (Keys.flow), [2] this enqueue's stage (Keys.flow_stage)
-- ARGV: [1] the stage's TTL ms, [2] the chunk's number (a call retried after a lost reply
--       finds its chunk staged and adds nothing: the roots list is no set), then per job
--       five values: its position, its enqueue call
--       (cmsgpack [script, KEYS, ARGV]), how many parents it waits for (0: a root, whose
--       call goes to the roots list instead of held), its parents ('' none; JSON) and its
--       children's positions ('' none; space-separated)
-- Touches: the stage's keys (<stage>:<part>, parts as the flow's: see _flow.lua), each
--          given the TTL, so a producer that dies before its commit leaves nothing.
-- Returns: 0 when the flow exists already (nothing staged), else 1.
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local stage, ttl = KEYS[2], ARGV[1]
if redis.call('SADD', stage .. ':chunks', ARGV[2]) == 0 then return 1 end
for a = 3, #ARGV, 5 do
  local position = ARGV[a]
  if tonumber(ARGV[a + 2]) > 0 then
    redis.call('HSET', stage .. ':held', position, ARGV[a + 1])
    redis.call('HSET', stage .. ':wait', position, ARGV[a + 2])
  else
    redis.call('RPUSH', stage .. ':roots', ARGV[a + 1])
  end
  if ARGV[a + 3] ~= '' then redis.call('HSET', stage .. ':parents', position, ARGV[a + 3]) end
  if ARGV[a + 4] ~= '' then redis.call('HSET', stage .. ':children', position, ARGV[a + 4]) end
end
for _, part in ipairs({'held', 'wait', 'parents', 'children', 'roots', 'chunks'}) do
  redis.call('PEXPIRE', stage .. ':' .. part, ttl)
end
return 1
