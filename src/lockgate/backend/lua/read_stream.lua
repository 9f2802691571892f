-- read_stream.lua: one read for a worker with free slots, following a policy's plan.
-- KEYS: the n streams to serve, highest level first, then their n delayed sets, same order,
--       then the namespace's wake stream (XADDed when a delayed job or retry is scheduled,
--       and when a queue is resumed), then the namespace's paused queues (Keys.paused: a
--       sorted set of queue names)
-- ARGV: group, consumer, limit (free slots), nlevels, quota per level (nlevels values),
--       level index (1-based) of each stream (n values), queue of each stream (n values),
--       then the job claims to take (see _read_claim.lua)
-- Touches: first moves due jobs from each delayed set into its stream (the server's clock
--          decides; atomic, so any number of workers may do it at once; under maxmemory
--          the move is skipped, the jobs stay delayed, and the read goes on: draining
--          frees memory), pointing each moved job's marker at its new entry; then
--          XREADGROUP on
--          the streams (creating the group at id 0 when missing, so jobs enqueued before any
--          worker started are delivered); XINFO when nothing was read.
-- Paused: the streams of a paused queue are not read (they count as dry), so no worker
--          takes a job from it once the pause's ZADD returned; their due delayed jobs
--          still move into them, and wait there.
-- Keyed jobs: a stream whose queue and level have a rotation of fairness keys is served one
--          job per turn (see _fair.lua): its keyed jobs move into its delivery stream
--          (Keys.fair_stream, derived from its name) and are read from there.
-- Pass 1 takes each level's quota in key order; pass 2 fills what is left in key order,
-- so no slot stays idle while any stream has work and precedence holds within each pass.
-- Claims: an entry of an idempotent task is claimed as it is read, with the token
--          '<token prefix>:<entry id>' (see _read_claim.lua).
-- Returns: {dry, entries, last_ids, next_due_ms}. dry[k] = 1 when stream k returned fewer
--          than asked (or its queue is paused); entries = flat {key index, entry id,
--          fields, claim, ms} quintuples (key index n + k: the delivery stream of stream
--          k), claim being 1 claimed, 0 already done, -1 busy (ms left on the holder's
--          lease), 2 not claimed here; last_ids = each
--          stream's last generated id when nothing was read (for a blocking XREAD wake-up;
--          '' for a paused queue's stream, whose new jobs must not wake an idle worker; the
--          wake stream's last, '0-0' while it does not exist), else {}; next_due_ms =
--          ms until the next delayed job is due, -1 when none.
--#include _clock
--#include _last_id
--#include _read_claim
--#include _marker
--#include _promote
--#include _fair
local group, consumer = ARGV[1], ARGV[2]
local remaining = tonumber(ARGV[3])
local nlevels = tonumber(ARGV[4])
local n = (#KEYS - 2) / 2
local wake = KEYS[2 * n + 1]
local quota = {}
for l = 1, nlevels do quota[l] = tonumber(ARGV[4 + l]) end
local claims = read_claims(4 + nlevels + 2 * n + 1)
local paused = {}
for _, queue in ipairs(redis.call('ZRANGE', KEYS[2 * n + 2], 0, -1)) do paused[queue] = true end
local function held(k) return paused[ARGV[4 + nlevels + n + k]] == true end

local function claim(entry_id, fields)
  local payload
  for i = 1, #fields, 2 do
    if fields[i] == 'job' then payload = fields[i + 1] break end
  end
  return claim_job(claims, entry_id, payload)
end

local next_due = promote(n)

local dry, entries = {}, {}
for k = 1, n do dry[k] = held(k) and 1 or 0 end

-- Read up to count jobs of stream `key`, reported as stream k.
local function read_from(key, k, count)
  local args = {'XREADGROUP', 'GROUP', group, consumer, 'COUNT', count, 'STREAMS', key, '>'}
  local reply = redis.pcall(unpack(args))
  if type(reply) == 'table' and reply.err then
    if not string.find(reply.err, 'NOGROUP', 1, true) then error(reply) end
    redis.call('XGROUP', 'CREATE', key, group, '0', 'MKSTREAM')
    reply = redis.call(unpack(args))
  end
  local got = 0
  if reply then
    for _, entry in ipairs(reply[1][2]) do
      local state, ms = claim(entry[1], entry[2])
      entries[#entries + 1] = k
      entries[#entries + 1] = entry[1]
      entries[#entries + 1] = entry[2]
      entries[#entries + 1] = state
      entries[#entries + 1] = ms
      got = got + 1
    end
  end
  return got
end

-- Read up to count jobs for stream k: one per turn of its fairness keys while it has
-- a rotation, else as they came. A stream found without one is read plainly for the rest
-- of the call (no keyed job arrives meanwhile: promote ran first).
local plain = {}
local function read(k, count)
  local moved, got
  if not plain[k] then
    moved, got = fair_take(KEYS[k], KEYS[k] .. '+', group, count, function(one)
      return read_from(KEYS[k], k, one)
    end)
  end
  if moved == nil then
    plain[k] = true
    got = read_from(KEYS[k], k, count)
  elseif moved > 0 then
    got = got + read_from(KEYS[k] .. '+', n + k, moved)
  end
  if got < count then dry[k] = 1 end
  return got
end

for k = 1, n do
  local level = tonumber(ARGV[4 + nlevels + k])
  local want = math.min(quota[level], remaining)
  if want > 0 and not held(k) then
    local got = read(k, want)
    quota[level] = quota[level] - got
    remaining = remaining - got
  end
end
for k = 1, n do
  if remaining <= 0 then break end
  if dry[k] == 0 then
    local got = read(k, remaining)
    remaining = remaining - got
  end
end

local last_ids = {}
if #entries == 0 then
  for k = 1, n do last_ids[k] = held(k) and '' or last_id(KEYS[k]) end
  last_ids[n + 1] = last_id(wake)
end
return {dry, entries, last_ids, next_due}
