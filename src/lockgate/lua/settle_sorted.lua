-- settle_sorted.lua: end one sorted-backend job's run in one step, only if this worker's
-- take of it is still the current one.
-- KEYS: [1] inflight, [2] payloads, [3] ranks, [4] deliveries, [5] owners, [6] delayed,
--       [7] the dead-letter stream, [8] the queue's wake stream, [9] the job's marker,
--       [10] the job's claim (optional), [11] the claim's 0.1 name (optional, with [10])
-- ARGV: [1] job id, [2] owner token of this take, [3] kind: 'done' | 'retry' | 'dead' | 'abandoned',
--       [4] claim token ('' when none), [5] claim action: 'done' | 'release' | 'keep',
--       [6] done marker TTL ms, [7] the done marker for the 0.1 name ('' when none),
--       [8] retry: next attempt (encoded job), [9] retry: delay ms, [10] retry: boost (us of
--       head start for its level), [11] dead letters kept at most (0: no limit), [12] their
--       max age ms (0: no limit), [13..] dead: field/value pairs
-- Touches: when owners[job id] is this take's token and the job is in flight: ZREM
--          inflight, HDEL owners and deliveries; done: HDEL payloads and ranks, DEL marker;
--          retry: payload and rank replaced, ZADD delayed at the server's clock + delay,
--          XADD wake; dead: HDEL payloads and ranks, XADD dead (trimmed), DEL marker. A
--          worker whose lease lapsed (paused, cut off) finds another token and touches
--          nothing; 'abandoned' touches no job. The claim, as in settle_stream.lua,
--          whatever the owner.
-- Returns: {1 when the take was ours and settled else 0, 1 when the claim action applied}
local id, token, kind = ARGV[1], ARGV[2], ARGV[3]
local owned = 0
if kind ~= 'abandoned' and redis.call('HGET', KEYS[5], id) == token
    and redis.call('ZSCORE', KEYS[1], id) then
  owned = 1
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[5], id)
  redis.call('HDEL', KEYS[4], id)
  if kind == 'retry' then
    local t = redis.call('TIME')
    local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    local delay = tonumber(ARGV[9])
    redis.call('HSET', KEYS[2], id, ARGV[8])
    redis.call('HSET', KEYS[3], id,
      string.format('%.0f', now_us + delay * 1000 - tonumber(ARGV[10])))
    redis.call('ZADD', KEYS[6], string.format('%.0f', math.floor(now_us / 1000) + delay), id)
    redis.call('XADD', KEYS[8], 'MAXLEN', '16', '*', 'due', ARGV[9])
  else
    redis.call('HDEL', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    if kind == 'dead' then
      local fields = {}
      for i = 13, #ARGV do fields[#fields + 1] = ARGV[i] end
      local max_len, max_age = tonumber(ARGV[11]), tonumber(ARGV[12])
      if max_len > 0 then
        redis.call('XADD', KEYS[7], 'MAXLEN', '~', max_len, '*', unpack(fields))
      else
        redis.call('XADD', KEYS[7], '*', unpack(fields))
      end
      if max_age > 0 then
        local t = redis.call('TIME')
        local oldest = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - max_age
        redis.call('XTRIM', KEYS[7], 'MINID', '~', string.format('%.0f', oldest))
      end
    end
    redis.call('DEL', KEYS[9])
  end
end
local claimed = 0
local claim_token, action = ARGV[4], ARGV[5]
if KEYS[10] and claim_token ~= '' and action ~= 'keep' then
  local current = redis.call('GET', KEYS[10])
  if action == 'done' then
    if current == 'd:' .. ARGV[4] then
      claimed = 1  -- applied by an earlier try whose reply was lost
    elseif not current or current == 'c:' .. claim_token then
      redis.call('SET', KEYS[10], 'd:' .. claim_token, 'PX', ARGV[6])
      claimed = 1
    end
  elseif current == 'c:' .. claim_token then
    redis.call('DEL', KEYS[10])
    claimed = 1
  end
end
if claimed == 1 and action == 'done' and KEYS[11] and ARGV[7] ~= '' then
  local old = redis.call('GET', KEYS[11])
  if not old or string.sub(old, 1, 2) == 'd:' then
    redis.call('SET', KEYS[11], ARGV[7], 'PX', ARGV[6])
  end
end
return {owned, claimed}
