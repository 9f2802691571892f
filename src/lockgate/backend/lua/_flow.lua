-- _flow.lua: a fragment, not a script. Included (--#include _flow) by settle_stream.lua,
-- settle_sorted.lua, flow_commit.lua, flow_release.lua and flow_cancel.lua: a flow's
-- barriers, moved in the call that settles a job of it (see lockgate.core.flows).
-- A flow's keys are its record (KEYS: Keys.flow, a hash: total, left (jobs not yet
-- done), failed (jobs dead now), ttl, expiring ('1' while its keys carry a TTL), shape,
-- tasks, token, created, cancelled) and the record's name with a suffix
-- (Keys.FLOW_PARTS): held (position -> its job's enqueue call, cmsgpack [script, KEYS,
-- ARGV], until its parents are done), wait (position -> parents not yet done), parents
-- and children (position -> positions), results (position -> result JSON; 'e<position>'
-- -> a dead job's result record), done and dead (sets of positions), roots (the enqueue
-- calls of the jobs that wait for nothing, a list until the commit and the releases
-- queue them). All share the record's hash tag.
-- flow_lib() returns the functions below, built when called: a settle of a job in no
-- flow (nearly all) builds none of them.
--   queue(record): queue a job by its own enqueue call (the library defines the enqueue
--     scripts' bodies before the scripts that include this); one queued already (its id
--     taken) is not queued again.
--   release(base, position): queue a held job; 1 when it was held.
--   expire(base, ttl_ms) / persist(base): every key of the flow.
--   drop_held(base): drop the jobs not yet queued; how many were held.
--   settled(base, position, action, result, dead_age_ms): the job at position ended:
--     'o' succeeded (result: its JSON, '' none): the first time only, its result is kept,
--     it leaves the dead set (a replayed dead letter), each child's barrier moves and a
--     child whose barrier reaches 0 is queued; the last job done starts the flow's TTL.
--     'x' dead-lettered (result: its result record): the flow is failed, its waiting jobs
--     stay held (a replay resumes it); its keys live at least as long as the dead letter
--     (dead_age_ms, 0: no limit). 'c' cancelled (or expired): the flow is cancelled, its
--     held jobs dropped. A key it makes expires with the record when the record expires
--     (a failed or cancelled flow). A flow whose record is gone is not written again.
--     Returns how many jobs it queued.
local function flow_lib()
  local lib = {}
  local enqueuers = {enqueue_stream = script_enqueue_stream,
    enqueue_sorted = script_enqueue_sorted}
  local parts = {'held', 'wait', 'parents', 'children', 'results', 'done', 'dead', 'roots'}

  function lib.queue(record)
    local call = cmsgpack.unpack(record)
    enqueuers[call[1]](call[2], call[3])
  end

  function lib.release(base, position)
    local held = base .. ':held'
    local record = redis.call('HGET', held, position)
    if not record then return 0 end
    redis.call('HDEL', held, position)
    lib.queue(record)
    return 1
  end

  function lib.expire(base, ttl)
    redis.call('HSET', base, 'expiring', '1')
    redis.call('PEXPIRE', base, ttl)
    for _, part in ipairs(parts) do redis.call('PEXPIRE', base .. ':' .. part, ttl) end
  end

  function lib.persist(base)
    redis.call('HDEL', base, 'expiring')
    redis.call('PERSIST', base)
    for _, part in ipairs(parts) do redis.call('PERSIST', base .. ':' .. part) end
  end

  local function keep_expiry(base)
    local left = redis.call('PTTL', base)
    if left > 0 then lib.expire(base, left) end
  end

  function lib.drop_held(base)
    local dropped = redis.call('HLEN', base .. ':held') + redis.call('LLEN', base .. ':roots')
    redis.call('DEL', base .. ':held', base .. ':wait', base .. ':roots')
    return dropped
  end

  function lib.settled(base, position, action, result, dead_age)
    local meta = redis.call('HMGET', base, 'ttl', 'failed', 'expiring', 'cancelled')
    local ttl, failed, expiring = meta[1], tonumber(meta[2] or '0'), meta[3]
    if not ttl then return 0 end
    local released = 0
    if action == 'o' then
      if redis.call('SADD', base .. ':done', position) == 0 then return 0 end
      local revived = failed > 0 and redis.call('SREM', base .. ':dead', position) == 1
      if revived then
        failed = redis.call('HINCRBY', base, 'failed', -1)
        redis.call('HDEL', base .. ':results', 'e' .. position)
      end
      if result and result ~= '' then
        redis.call('HSET', base .. ':results', position, result)
      end
      local children = redis.call('HGET', base .. ':children', position)
      if children then
        for child in string.gmatch(children, '%d+') do
          if redis.call('HINCRBY', base .. ':wait', child, -1) <= 0 then
            redis.call('HDEL', base .. ':wait', child)
            released = released + lib.release(base, child)
          end
        end
      end
      if redis.call('HINCRBY', base, 'left', -1) <= 0 then
        lib.expire(base, ttl)
      elseif revived and failed == 0 and not meta[4] then
        lib.persist(base)
      elseif expiring then
        keep_expiry(base)
      end
    elseif action == 'x' then
      if redis.call('SADD', base .. ':dead', position) == 1 then
        redis.call('HINCRBY', base, 'failed', 1)
      end
      if result and result ~= '' then
        redis.call('HSET', base .. ':results', 'e' .. position, result)
      end
      local age = tonumber(dead_age) or 0
      if age > 0 then
        lib.expire(base, math.max(tonumber(ttl), age))
      elseif expiring then
        keep_expiry(base)
      end
    else
      redis.call('HSET', base, 'cancelled', '1')
      lib.drop_held(base)
      lib.expire(base, ttl)
    end
    return released
  end

  -- job_removed(marker, job_id, payload): a waiting job was removed unrun (cancelled,
  -- purged): when it is a job of a flow (its payload names the flow), the jobs that wait
  -- for it can never run, so its flow is cancelled. The flow's record is in the job's
  -- partition: the marker's name less ':job:<id>' is the prefix.
  function lib.job_removed(marker, job_id, payload)
    local ok, job = pcall(cjson.decode, payload or '')
    if not ok or type(job) ~= 'table' or type(job.flow) ~= 'string' then return end
    local flow = job.flow
    local position = string.sub(job_id, #flow + 2)
    if string.sub(job_id, 1, #flow + 1) ~= flow .. '.' or not tonumber(position) then return end
    local prefix = string.sub(marker, 1, #marker - #job_id - 5)
    lib.settled(prefix .. ':flow:' .. flow, position, 'c', '', 0)
  end

  return lib
end

-- Whether a job's payload may be a flow's (then flow_lib().job_removed looks closer).
local function in_flow(payload)
  return payload and string.find(payload, '"flow":', 1, true) ~= nil
end
