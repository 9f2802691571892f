-- _fair.lua: a fragment, not a script. Included (--#include _fair) by the scripts that
-- queue, hand out, find or remove the jobs of tasks with a fairness key
-- (@app.task(key_by=...)) on the streams backend.
-- A keyed job waits in its lane's own stream (Keys.fair_jobs: '<rotation>:<lane>', no
-- group), not in its level's stream. A lane is '=<key>' for the key's jobs of tasks
-- without a limit, and '<task>=<key>' for its jobs of a task with key_concurrency (a task
-- name has no '='), so that a key at one task's limit holds back none of its other jobs. The rotation (Keys.fair_rotation,
-- '<prefix>:fair:<queue>:<level>': a sorted set, so that only commands of the README's ACL
-- list are needed, and a key leaves it in O(log n)) scores each key with jobs waiting by
-- its next turn, and '' for the turn of the level's jobs without a key, which stay in the
-- level's stream: a lane is in it exactly while its stream has entries, and '' exactly
-- while some lane is. (A key's limited tasks' jobs thus take turns of their own.) A read (read_stream.lua) serves a level whose rotation exists one job
-- per turn: it takes the lowest-scored turn, moves that key's oldest job into the level's
-- delivery stream (Keys.fair_stream, '<level stream>+'), or reads one job of the level's
-- stream for '', and scores the turn after the last one while it has jobs left; then one
-- XREADGROUP hands out the moved jobs. A key with 100,000 jobs waiting and a key with 3 get one turn each per round.
-- The delivery stream holds only jobs handed out (running), so acks, reclaims and
-- heartbeats treat it as any stream. A waiting keyed job's marker reads
-- 'fair <entry> <queue>:<level> <key>' (the key last: it may hold spaces).
-- Names a script builds here, that no caller passes: the key streams and the moved jobs'
-- markers. They start with the prefix of a key the caller passed, so they carry its hash
-- tag and lie in the slot the call was routed to.
-- is_lane(name): whether a key name is a lane's stream.
-- fair_names(jobs): rotation, '<queue>:<level>', lane of a lane stream's name.
-- fair_add(jobs, job, marker): queue an encoded job in its lane's stream (`jobs` names the
--   key's lane '=<key>'; a job of a limited task goes to its task's lane instead), joining
--   the rotation when the lane had none waiting, and point its marker there; returns its
--   entry.
-- fair_forget(jobs): after an entry left a key stream other than by a turn (a cancel, a
--   purge), drop the key from its rotation if its stream is now empty.
-- fair_route(stream, job): the key stream and the marker of an encoded job of the level
--   stream `stream` when the job has a fairness key, else nil.
-- fair_take(stream, delivery, group, want, read_plain): up to `want` turns of the rotation
--   of the level stream `stream` (see above), moving keyed jobs into `delivery`;
--   read_plain(1) reads one job of the level's stream and returns how many it got.
--   Returns the number of jobs moved and of jobs read by read_plain, or nil when the
--   level has no rotation.
-- fair_release(delivery, entry): give back the slot the job of a delivery stream's entry
--   holds, if any (its settle calls it); true when it held one.
-- Limits (@app.task(key_concurrency=N)): the hash '<prefix>:fair-limits' (Keys.fair_limits,
-- written by workers as they start) gives a task's N (0 or none: no limit). A job of a
-- limited task moves only while its task and key hold fewer than N slots: the sorted set
-- '<prefix>:slots/<bytes of task>:<task>:<key>' (Keys.fair_slots), whose members are the
-- delivery entries holding one ('<queue>:<level> <entry>', scored by the ms they took it).
-- A slot belongs to the job's run, not to a worker: it is held while its entry is pending
-- in the consumer group, whoever owns it (a dead worker's job is reclaimed and run again
-- with its slot), renewed by nothing else, and given back in the settle that acks the
-- entry, which only the entry's owner can do (a zombie's settle gives back nothing). A
-- member whose entry is no longer pending (a slot that leaked: a flushed group, a stream
-- deleted by hand) is dropped when the limit is reached and the slots are counted again.
-- The delivery stream's hash '<prefix>:fair-holds:<queue>:<level>' (Keys.fair_holds) maps
-- an entry to the slots key it holds, for the settle. Within its turn a key moves the
-- first of its next SCAN jobs whose task has a slot free (a job queued before its task's
-- limit was published waits in the key's lane '=<key>').
--#include _job_names
--#include _clock
local FAIR_SCAN = 16
-- Turns a read may spend on lanes that give nothing (all at their limit) before it stops:
-- a call stays short however many lanes wait (the lanes it passed go to the back).
local FAIR_IDLE_TURNS = 256
-- Whether a key name is a lane's stream (not a level stream of a queue named 'fair').
local function is_lane(name)
  return string.find(name, '}:fair:', 1, true) ~= nil
end

local function fair_names(jobs)
  local rotation, queue, level, key = string.match(jobs, '^(.-}:fair:([^:]+):([^:]+)):(.+)$')
  return rotation, queue .. ':' .. level, key
end

local limits = {}
local function limit_of(prefix, task)
  local limit = limits[task]
  if limit == nil then
    limit = tonumber(redis.call('HGET', prefix .. ':fair-limits', task) or '0') or 0
    limits[task] = limit
  end
  return limit
end

-- The key of a lane ('=<key>' or '<task>=<key>').
local function lane_key(lane)
  return string.sub(lane, string.find(lane, '=', 1, true) + 1)
end

-- The score after the rotation's last turn (1 for an empty rotation).
local function next_turn(rotation)
  local last = redis.call('ZRANGE', rotation, -1, -1, 'WITHSCORES')
  return last[2] and tonumber(last[2]) + 1 or 1
end

local function fair_add(jobs, job, marker)
  local rotation, place, lane = fair_names(jobs)
  local _, task = job_names(job)
  if task and limit_of(string.match(rotation, '^(.-):fair:'), task) > 0 then
    lane = task .. '=' .. lane_key(lane)
    jobs = rotation .. ':' .. lane
  end
  local key = lane
  local entry = redis.call('XADD', jobs, '*', 'job', job)
  if redis.call('XLEN', jobs) == 1 then
    local turn = next_turn(rotation)
    if turn == 1 then
      redis.call('ZADD', rotation, 1, '')
      turn = 2
    end
    redis.call('ZADD', rotation, turn, key)
  end
  redis.call('SET', marker, 'fair ' .. entry .. ' ' .. place .. ' ' .. key)
  return entry
end

local function fair_forget(jobs)
  if redis.call('XLEN', jobs) > 0 then return end
  local rotation, _, key = fair_names(jobs)
  redis.call('DEL', jobs)
  redis.call('ZREM', rotation, key)
  if redis.call('ZCARD', rotation) == 1 then redis.call('DEL', rotation) end
end

local function rotation_of(stream)
  local prefix, place = string.match(stream, '^(.-):stream:(.+)$')
  return prefix .. ':fair:' .. place, prefix
end

local function fair_route(stream, job)
  if not string.find(job, '"key":"', 1, true) then return nil end
  local ok, decoded = pcall(cjson.decode, job)
  if not ok or type(decoded) ~= 'table' or type(decoded.key) ~= 'string'
      or decoded.key == '' or type(decoded.id) ~= 'string' then
    return nil
  end
  local rotation, prefix = rotation_of(stream)
  return rotation .. ':=' .. decoded.key, prefix .. ':job:' .. decoded.id
end

-- Slots taken by this call: their entries are not pending before its XREADGROUP.
local taken_here = {}
-- Slots keys found full in this call (nothing frees a slot during it).
local full = {}

-- Whether a slot of `slots` is free under `limit`, after dropping the members whose entry
-- is no longer pending.
local function slot_free(prefix, slots, limit, group)
  if full[slots] then return false end
  if redis.call('ZCARD', slots) < limit then return true end
  for _, member in ipairs(redis.call('ZRANGE', slots, 0, -1)) do
    local place, entry = string.match(member, '^(%S+) (%S+)$')
    if not taken_here[member] then
      local pending = place and redis.pcall('XPENDING', prefix .. ':stream:' .. place .. '+',
        group, entry, entry, 1)
      if not pending or pending.err or #pending == 0 then
        redis.call('ZREM', slots, member)
        redis.call('HDEL', prefix .. ':fair-holds:' .. place, entry)
      end
    end
  end
  if redis.call('ZCARD', slots) < limit then return true end
  full[slots] = true
  return false
end

-- The first of a key's next jobs that may move now (its task has a slot free, or no
-- limit): its entry in the key's stream, payload, slots key (nil: no limit), and whether
-- the lane has more jobs after it (nil: not known); or nil. A job of a task without a
-- limit (nearly all) costs a read of the lane's first two entries; the lane's first
-- SCAN are looked at only when its first job waits for a slot.
local function movable(prefix, jobs, lane, group)
  local head = redis.call('XRANGE', jobs, '-', '+', 'COUNT', 2)
  if not head[1] then return nil end
  local job = head[1][2][2]
  local _, task = job_names(job)
  if not task or limit_of(prefix, task) <= 0 then return head[1][1], job, nil, head[2] ~= nil end
  local key = lane_key(lane)
  for _, found in ipairs(redis.call('XRANGE', jobs, '-', '+', 'COUNT', FAIR_SCAN)) do
    job = found[2][2]
    _, task = job_names(job)
    local limit = task and limit_of(prefix, task) or 0
    if limit <= 0 then return found[1], job, nil, nil end
    local slots = prefix .. ':slots/' .. #task .. ':' .. task .. ':' .. key
    if slot_free(prefix, slots, limit, group) then return found[1], job, slots, nil end
  end
  return nil
end

local function fair_take(stream, delivery, group, want, read_plain)
  local rotation, prefix = rotation_of(stream)
  local turns = redis.call('ZCARD', rotation)
  if turns == 0 then return nil end
  local place = string.match(delivery, ':stream:(.+)$')
  local level_place = string.sub(place, 1, -2)
  local turn = next_turn(rotation)
  local moved, read, plain_dry = 0, 0, false
  local lanes = turns - 1  -- the rotation's lanes, '' aside
  local blocked, nblocked = {}, 0  -- lanes found at their limit in this call
  -- Turns that give nothing count against the budget once per lane (a lane found at its
  -- limit stays so for the call), and not at all for '' once its stream is dry.
  local budget = want + math.min(turns, FAIR_IDLE_TURNS)
  -- Rounds: the next lanes in turn order, one ZRANGE, each given its turn, then their
  -- next turns (after every lane now in the rotation) in one ZADD and the emptied lanes
  -- dropped in one ZREM: the order of the turns is the one a ZRANGE per turn would give.
  while moved + read < want and budget > 0 and nblocked < lanes do
    local round = redis.call('ZRANGE', rotation, 0, want - moved - read - 1)
    if #round == 0 then break end
    local rescored, dropped = {}, {}
    for _, lane in ipairs(round) do
      if moved + read >= want or budget <= 0 or nblocked >= lanes then break end
      local stays = true
      if lane == '' then
        if not plain_dry then
          budget = budget - 1
          local got = read_plain(1)
          read = read + got
          plain_dry = got == 0
        end
      elseif not blocked[lane] then
        budget = budget - 1
        local jobs = rotation .. ':' .. lane
        local first, job, slots, more = movable(prefix, jobs, lane, group)
        if first then
          redis.call('XDEL', jobs, first)
          local entry = redis.call('XADD', delivery, '*', 'job', job)
          local id = job_names(job)
          if id then redis.call('SET', prefix .. ':job:' .. id, entry .. ' ' .. place) end
          if slots then
            taken_here[level_place .. ' ' .. entry] = true
            redis.call('ZADD', slots, now_ms(), level_place .. ' ' .. entry)
            redis.call('HSET', prefix .. ':fair-holds:' .. level_place, entry, slots)
          end
          moved = moved + 1
        end
        if more == nil then more = redis.call('XLEN', jobs) > 0 end
        if not more then
          stays = false
          redis.call('DEL', jobs)
          dropped[#dropped + 1] = lane
          lanes = lanes - 1
        elseif not first then
          blocked[lane] = true
          nblocked = nblocked + 1
        end
      end
      if stays then
        rescored[#rescored + 1] = turn
        rescored[#rescored + 1] = lane
        turn = turn + 1
      end
    end
    if #rescored > 0 then redis.call('ZADD', rotation, unpack(rescored)) end
    if #dropped > 0 then redis.call('ZREM', rotation, unpack(dropped)) end
  end
  -- Every lane waits for a slot, or out of budget (more lanes at their limit than a call
  -- looks at): the level's stream still serves, so that no worker idles while its jobs
  -- wait.
  if moved + read < want and not plain_dry and (nblocked >= lanes or budget <= 0) then
    read = read + read_plain(want - moved - read)
  end
  if redis.call('ZCARD', rotation) == 1 then redis.call('DEL', rotation) end
  return moved, read
end

local function fair_release(delivery, entry)
  local prefix, place = string.match(delivery, '^(.-):stream:(.+)%+$')
  if not prefix then return false end
  local holds = prefix .. ':fair-holds:' .. place
  local slots = redis.call('HGET', holds, entry)
  if not slots then return false end
  redis.call('ZREM', slots, place .. ' ' .. entry)
  redis.call('HDEL', holds, entry)
  return true
end
