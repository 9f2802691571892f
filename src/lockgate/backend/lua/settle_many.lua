-- settle_many.lua: the settle calls of one stream (or one sorted queue) in one call: one
-- script invocation and one reply for a batch of endings instead of one per job.
-- It calls the settle scripts' own bodies (script_settle_stream, script_settle_sorted:
-- the library defines them before this one), so a batch does exactly what its calls
-- would one by one, in order.
-- Two forms, by ARGV[1]:
-- 'settle_stream' | 'settle_sorted': each call whole.
--   KEYS: each call's KEYS, one call after the other
--   ARGV: [2..] per call: its KEYS count, its ARGV count, its ARGV
-- 'stream_done': streams endings 'done' with no result record, dead letter, retry or
--   older claim names (nearly every ending), in 10 values each instead of 24 and 10 keys:
--   what they share goes once, and the job's own keys are built here from the
--   namespace's key prefix and the job id, as Keys does (the keys of one job and of its
--   stream share the hash tag, hence the slot; BullMQ's scripts build job keys from a
--   prefix the same way).
--   KEYS: [1] the stream, [2] its delayed set, [3] the dead-letter stream, [4] the wake stream
--   ARGV: [2] group, [3] consumer, [4] key prefix ('lockgate:{tag}'), [5] done-marker
--         buckets' prefix, [6] final record TTL ms, then per ending: entry id, job id,
--         final record ('' none), status shard, claim name ('' none: the part after
--         '<prefix>:idem:'), claim token, claim action, claim done-marker TTL ms, history
--         entry ('' none), its task's name (the history keys, '<prefix>:ends:d:<task>'
--         and '<prefix>:ends', built here as Keys.history and Keys.history_tasks do)
-- Returns: per call, its script's reply; {-1, message} for a call that raised (the
--          others still apply, as in a pipeline)
local replies = {}
local function apply(settle, keys, args)
  local ok, reply = pcall(settle, keys, args)
  if not ok then
    if type(reply) == 'table' then reply = reply.err end
    reply = {-1, tostring(reply)}
  end
  replies[#replies + 1] = reply
end

if ARGV[1] == 'stream_done' then
  local prefix, done_prefix, final_ttl = ARGV[4], ARGV[5], ARGV[6]
  local statuses = prefix .. ':statuses'
  for a = 7, #ARGV, 10 do
    local id, claim, entry = ARGV[a + 1], ARGV[a + 4], ARGV[a + 8]
    local keys = {KEYS[1], prefix .. ':job:' .. id, KEYS[2], KEYS[3], KEYS[4],
      prefix .. ':result:' .. id, statuses}
    local token, action, ttl = '', 'keep', 0
    if claim ~= '' then
      keys[8] = prefix .. ':idem:' .. claim
      token, action, ttl = ARGV[a + 5], ARGV[a + 6], ARGV[a + 7]
    end
    if entry ~= '' then
      keys[#keys + 1] = prefix .. ':ends:d:' .. ARGV[a + 9]
      keys[#keys + 1] = prefix .. ':ends'
    end
    apply(script_settle_stream, keys, {ARGV[2], ARGV[3], ARGV[a], 'done', token, action, ttl,
      '', done_prefix, '0', '', 0, 0, 0, ARGV[a + 2], final_ttl, id, ARGV[a + 3], '', 0, '',
      '', entry, ARGV[a + 9]})
  end
  return replies
end

local settle = ({settle_stream = script_settle_stream, settle_sorted = script_settle_sorted})[ARGV[1]]
if not settle then return redis.error_reply('settle_many: unknown form ' .. tostring(ARGV[1])) end
local k, a = 1, 2
while a <= #ARGV do
  local key_count, arg_count = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  apply(settle, {unpack(KEYS, k, k + key_count - 1)}, {unpack(ARGV, a + 2, a + 1 + arg_count)})
  k, a = k + key_count, a + 2 + arg_count
end
return replies
