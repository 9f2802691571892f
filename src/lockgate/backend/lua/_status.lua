-- _status.lua: a fragment, not a script. Included (--#include _status) by the scripts
-- that keep, read or forget a job's final record (App(status_ttl=...)).
-- A final record is a field (the job id) of a hash, not a key of its own: the records of
-- one time window (an eighth of their TTL, on the server's clock) go into 4,096 hashes,
-- '<index>:<expiry ms>:<shard>' (shard: Keys.status_shard, 3 hex digits of the id's
-- CRC-32, computed by the caller; expiry: the window's end plus the TTL, when the hash
-- expires as a whole), so a record is kept between its TTL and 1.125 times it, and
-- nothing trims fields one by one (Redis 7.0 has no per-field expiry: HEXPIRE came in
-- 7.4). The name holds the expiry, so a hash that exists has it: one PEXPIREAT NX per
-- record, and the index is written only when it made a new hash.
-- Memory: a hash of at most 128 fields (hash-max-listpack-entries) of at most 64 bytes
-- (hash-max-listpack-value) is one compact listpack, about 40 B per record (a 32-character
-- id, a 30-byte msgpack record, their headers), where a string key with a TTL costs about
-- 210 B. Windows of more than 500,000 records (4,096 x 128: more than about 7,000 jobs a
-- second sustained with the 10-minute default) outgrow the listpacks, about 140 B a record;
-- a record over 64 bytes (a long task name or reason) turns its own hash into the same.
-- The index (KEYS: Keys.statuses) is a sorted set of the hashes' expiries (members and
-- scores alike): a reader looks in the live ones, latest first, whatever TTL the writers
-- had (with one TTL, the latest window first).
-- keep_status(index, id, shard, record, ttl_ms): keep a record for at least ttl_ms.
-- status_record(index, id, shard) -> the newest record kept for the id, or false.
-- forget_status(index, id, shard): drop the id's records (a purged job's earlier ones).
--#include _clock
-- The live hashes' expiries, latest first (ZRANGEBYSCORE reversed here: the commands
-- of the documented ACL line stay the same).
local function status_windows(index)
  local live = redis.call('ZRANGEBYSCORE', index, '(' .. now_ms(), '+inf')
  local latest = {}
  for i = #live, 1, -1 do latest[#latest + 1] = live[i] end
  return latest
end

local function keep_status(index, id, shard, record, ttl_ms)
  local ttl = tonumber(ttl_ms)
  local width = math.max(1, math.floor(ttl / 8))
  local now = now_ms()
  local at = string.format('%.0f', now - now % width + width + ttl)
  local bucket = index .. ':' .. at .. ':' .. shard
  redis.call('HSET', bucket, id, record)
  if redis.call('PEXPIREAT', bucket, at, 'NX') == 1 then -- a new hash: list it
    redis.call('ZREMRANGEBYSCORE', index, '-inf', now)
    redis.call('ZADD', index, at, at)
    if redis.call('PEXPIREAT', index, at, 'GT') == 0 then
      redis.call('PEXPIREAT', index, at, 'NX')
    end
  end
end

local function status_record(index, id, shard)
  for _, at in ipairs(status_windows(index)) do
    local record = redis.call('HGET', index .. ':' .. at .. ':' .. shard, id)
    if record then return record end
  end
  return false
end

local function forget_status(index, id, shard)
  for _, at in ipairs(status_windows(index)) do
    redis.call('HDEL', index .. ':' .. at .. ':' .. shard, id)
  end
end
