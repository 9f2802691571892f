-- _flow.lua: a fragment, not a script. Included (--#include _flow) by settle_stream.lua,
-- settle_sorted.lua, flow_commit.lua and flow_release.lua: a flow's barriers, moved in
-- the call that settles a job of it (see lockgate.core.flows).
-- A flow's keys are its record (KEYS: Keys.flow, a hash: total, ttl, shape, token,
-- cancelled) and the record's name with a suffix (Keys.FLOW_PARTS): held (position ->
-- its job's enqueue call, cmsgpack [script, KEYS, ARGV], until queued), wait (position ->
-- parents not yet done), parents and children (position -> positions), results
-- (position -> result JSON), done and dead (sets of positions), roots (a list of the
-- positions the flow's commit queues). All share the record's hash tag.
-- flow_release(base, position): queue a held job by its own enqueue call (the library
--   defines the enqueue scripts' bodies before the scripts that include this); a job
--   queued already (not held) is not queued again. Returns 1 when it queued one.
-- flow_expire(base, ttl_ms) / flow_persist(base): every key of the flow.
-- flow_settled(base, position, action, result, dead_age_ms, wake): the job at position
--   ended: 'o' succeeded (result: its JSON, '' none): the first time only, its result is
--   kept, it leaves the dead set (a replayed dead letter), each child's barrier moves and
--   a child whose barrier reaches 0 is queued; the last job done starts the flow's TTL.
--   'x' dead-lettered (result: its error record, kept as results['e<position>']):
--   the flow is failed, its waiting jobs stay held (a replay resumes
--   it); its keys live at least as long as the dead letter (dead_age_ms, 0: no limit).
--   'c' cancelled (or expired): the flow is cancelled, its held jobs dropped.
--   A flow whose record is gone (expired) is not written again. Returns how many jobs it
--   queued.
local flow_enqueuers = {enqueue_stream = script_enqueue_stream,
  enqueue_sorted = script_enqueue_sorted}
local FLOW_PARTS = {'held', 'wait', 'parents', 'children', 'results', 'done', 'dead', 'roots'}

local function flow_release(base, position)
  local held = base .. ':held'
  local record = redis.call('HGET', held, position)
  if not record then return 0 end
  redis.call('HDEL', held, position)
  local call = cmsgpack.unpack(record)
  flow_enqueuers[call[1]](call[2], call[3])
  return 1
end

local function flow_expire(base, ttl)
  redis.call('PEXPIRE', base, ttl)
  for _, part in ipairs(FLOW_PARTS) do redis.call('PEXPIRE', base .. ':' .. part, ttl) end
end

local function flow_persist(base)
  redis.call('PERSIST', base)
  for _, part in ipairs(FLOW_PARTS) do redis.call('PERSIST', base .. ':' .. part) end
end

-- A key a settle made (the first result, the first dead job) expires with the record,
-- when the record expires (a cancelled or failed flow): nothing of a flow outlives it.
local function flow_keep_expiry(base)
  local left = redis.call('PTTL', base)
  if left > 0 then flow_expire(base, left) end
end

local function flow_drop_held(base)
  local dropped = redis.call('HLEN', base .. ':held')
  redis.call('DEL', base .. ':held', base .. ':wait', base .. ':roots')
  return dropped
end

local function flow_settled(base, position, action, result, dead_age)
  local released = 0
  if redis.call('EXISTS', base) == 0 then return released end
  local ttl = redis.call('HGET', base, 'ttl')
  if action == 'o' then
    if redis.call('SADD', base .. ':done', position) == 0 then return released end
    local revived = redis.call('SREM', base .. ':dead', position) == 1
    if revived then redis.call('HDEL', base .. ':results', 'e' .. position) end
    if result and result ~= '' then redis.call('HSET', base .. ':results', position, result) end
    local children = redis.call('HGET', base .. ':children', position)
    if children then
      for child in string.gmatch(children, '%d+') do
        if redis.call('HINCRBY', base .. ':wait', child, -1) <= 0 then
          redis.call('HDEL', base .. ':wait', child)
          released = released + flow_release(base, child)
        end
      end
    end
    if redis.call('SCARD', base .. ':done') >= tonumber(redis.call('HGET', base, 'total')) then
      flow_expire(base, ttl)
    elseif revived then
      flow_persist(base)
    else
      flow_keep_expiry(base)
    end
  elseif action == 'x' then
    redis.call('SADD', base .. ':dead', position)
    if result and result ~= '' then redis.call('HSET', base .. ':results', 'e' .. position, result) end
    local age = tonumber(dead_age) or 0
    if age > 0 then flow_expire(base, math.max(tonumber(ttl), age)) else flow_keep_expiry(base) end
  else
    redis.call('HSET', base, 'cancelled', '1')
    flow_drop_held(base)
    flow_expire(base, ttl)
  end
  return released
end
