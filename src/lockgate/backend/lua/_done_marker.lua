-- _done_marker.lua: a fragment, not a script. Included (--#include _done_marker) by
-- _take_claim.lua, _settle_claim.lua and idem_settle.lua.
-- A done marker is a member of a bucketed sorted set, not a key of its own: for a claim key
-- k, h = SHA1(k) in hex; the bucket is the sorted set '<prefix><h[1..3]>' (4,096 buckets per
-- namespace; prefix is Keys.done_bucket_prefix, '<namespace prefix>:done:', so the hash tag
-- is the claim's), the member h[4..27] (96 bits: no practical collision), its score the
-- marker's expiry in whole seconds of the server's clock, rounded up.
-- Memory: a sorted set of at most 128 members (zset-max-listpack-entries) of at most 64
-- bytes is one compact listpack, about 35 B per member (24 B of digest, its integer score,
-- their headers), where a string key with a TTL costs about 210 B. The 4,096 bucket keys
-- (with their expiries) add about 1 MB in all: measured, 43 B per marker with 100,000 live
-- markers in a namespace (tests/faults/test_done_marker_memory.py), 37 B with 400,000, 75 B
-- with 20,000. Past about 400,000 (100 per bucket on average) more and more buckets grow
-- over 128 members and turn into skiplists, about 140 B per member: 70 B per marker on
-- average at 500,000, 135 B at 700,000 (raise zset-max-listpack-entries for more).
-- An expired member stays until the next write to its bucket drops it (ZREMRANGEBYSCORE),
-- and counts as not done meanwhile; a bucket key expires with its latest member.
-- marker_done(prefix, claim) -> true while the claim key's marker has not expired.
-- write_marker(prefix, claim, ttl_ms) writes it to expire ttl_ms from now, keeping a later
-- expiry the member already has (ZADD GT).
--#include _clock
-- A prefix that does not end in ':' is a bucket itself: a user claim of a partitioned
-- namespace has a hash tag of its own, holding one bucket (see lockgate.backend.partitions).
local function marker_place(prefix, claim)
  local h = redis.sha1hex(claim)
  if string.sub(prefix, -1) ~= ':' then return prefix, string.sub(h, 4, 27) end
  return prefix .. string.sub(h, 1, 3), string.sub(h, 4, 27)
end

local function marker_done(prefix, claim)
  local bucket, member = marker_place(prefix, claim)
  local expiry = redis.call('ZSCORE', bucket, member)
  return expiry ~= false and tonumber(expiry) * 1000 > now_ms()
end

local function write_marker(prefix, claim, ttl_ms)
  local bucket, member = marker_place(prefix, claim)
  local now = now_ms()
  local expiry = math.ceil((now + tonumber(ttl_ms)) / 1000)
  redis.call('ZREMRANGEBYSCORE', bucket, '-inf', string.format('%.0f', math.floor(now / 1000)))
  redis.call('ZADD', bucket, 'GT', string.format('%.0f', expiry), member)
  local at = string.format('%.0f', expiry * 1000)
  -- GT never sets an expiry on a key that has none (a bucket ZADD just created): then set
  -- it plainly. (Usually GT applies: the newest marker is the latest to expire.)
  if redis.call('PEXPIREAT', bucket, at, 'GT') == 0 and redis.call('PTTL', bucket) == -1 then
    redis.call('PEXPIREAT', bucket, at)
  end
end
