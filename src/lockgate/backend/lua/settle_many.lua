-- settle_many.lua: the settle calls of one stream (or one sorted queue) in one call: one
-- script invocation and one reply for a batch of endings instead of one per job.
-- It calls the settle scripts' own bodies (script_settle_stream, script_settle_sorted:
-- the library defines them before this one), so a batch does exactly what its calls
-- would one by one, in order.
-- KEYS: each call's KEYS, one call after the other
-- ARGV: [1] the script ('settle_stream' | 'settle_sorted'), then per call: its KEYS
--       count, its ARGV count, its ARGV
-- Returns: per call, its script's reply; {-1, message} for a call that raised (the
--          others still apply, as in a pipeline)
local settle = ({settle_stream = script_settle_stream, settle_sorted = script_settle_sorted})[ARGV[1]]
if not settle then return redis.error_reply('settle_many: unknown script ' .. tostring(ARGV[1])) end
local replies, k, a = {}, 1, 2
while a <= #ARGV do
  local key_count, arg_count = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local keys = {unpack(KEYS, k, k + key_count - 1)}
  local args = {unpack(ARGV, a + 2, a + 1 + arg_count)}
  local ok, reply = pcall(settle, keys, args)
  if not ok then
    if type(reply) == 'table' then reply = reply.err end
    reply = {-1, tostring(reply)}
  end
  replies[#replies + 1] = reply
  k, a = k + key_count, a + 2 + arg_count
end
return replies
