-- enqueue_sorted.lua: add jobs to one sorted-backend queue unless their id is taken or
-- their once-only key (a cron tick's) was.
-- KEYS: waiting, payloads, ranks, clock, wake (a stream), delayed, then per job two keys:
--       its marker and its once-only key (any key when it has none)
-- ARGV: per job, five values: job id, boost (us of head start for its level), encoded job,
--       delay in ms (0: now; a job of a debounced task: '<wait ms> <cap ms>', see
--       _debounce.lua), the once-only key's TTL ms (0: none)
-- Touches: markers (SET 'sorted <queue>', see _marker.lua), once-only keys (SET NX PX),
--          waiting or delayed (ZADD; a keyed job whose key has a job waiting: its key's
--          lane, see _fair_sorted.lua), payloads and ranks (HSET), clock (SET), wake (XADD
--          MAXLEN 16: every idle worker blocks on it with XREAD, so one enqueue wakes them
--          all, not one per call as a BLPOP list would).
-- Stamps come from the server clock and strictly increase per queue, so jobs of one level
-- keep FIFO order and producers' clocks never matter. rank = stamp - boost, lowest first;
-- a delayed job's stamp is its due time, and it waits in delayed until then.
-- Returns: per job 1 when added, 0 when its id was already queued, delayed or running, or
-- its tick was taken; for a debounced job 'delayed', 'merged' or 'next' (_debounce.lua).
-- A call retried after its reply was lost finds its own job there (the same encoded bytes
-- in payloads) and answers 1 again, as the first time did; within one call an id counts
-- once.
--#include _clock
--#include _marker
--#include _debounce_sorted
--#include _fair_sorted
local stamp = now_us()
local now = math.floor(stamp / 1000)
local last = tonumber(redis.call('GET', KEYS[4]) or '0')
if stamp <= last then stamp = last + 1 end
local out, added, added_here = {}, 0, {}
local placed_as = 'sorted ' .. queue_of(KEYS[1])
local q = {waiting = KEYS[1], payloads = KEYS[2], ranks = KEYS[3], delayed = KEYS[6]}
for i = 7, #KEYS, 2 do
  local j = (i - 7) / 2 * 5
  local job_id, boost, payload = ARGV[j + 1], tonumber(ARGV[j + 2]), ARGV[j + 3]
  local delay = tonumber(ARGV[j + 4])
  local placed = redis.call('GET', KEYS[i])
  local free = not placed
  local debounced = not delay
    and not (placed and redis.call('HGET', KEYS[2], job_id) == payload)
  if debounced and not take_once(KEYS[i + 1], ARGV[j + 5]) then
    out[#out + 1] = 0  -- a debounced job relayed again from an outbox row: no second run
  elseif debounced then
    out[#out + 1] = debounce_enqueue_sorted(KEYS[i], q, job_id, boost, payload, ARGV[j + 4],
      placed, now)
    added_here[job_id] = true
    if out[#out] ~= 'next' then added = added + 1 end
  elseif free and not take_once(KEYS[i + 1], ARGV[j + 5]) then
    out[#out + 1] = 0
  elseif free then
    redis.call('SET', KEYS[i], placed_as)
    -- format by hand: Lua's default %.14g would round a microsecond stamp
    local rank = string.format('%.0f', stamp + delay * 1000 - boost)
    if delay > 0 then
      -- due in ms to the microsecond: a keyed job's lane score is its due time, and that
      -- less its rank must be its level's boost exactly (take_sorted.lua, _fair_sorted.lua)
      redis.call('ZADD', KEYS[6], string.format('%.3f', (stamp + delay * 1000) / 1000), job_id)
    elseif not sorted_place(KEYS[1], job_id, rank, stamp, payload) then
      redis.call('ZADD', KEYS[1], rank, job_id)
    end
    redis.call('HSET', KEYS[2], job_id, payload)
    redis.call('HSET', KEYS[3], job_id, rank)
    stamp = stamp + 1
    added = added + 1
    added_here[job_id] = true
    out[#out + 1] = 1
  elseif not added_here[job_id] and redis.call('HGET', KEYS[2], job_id) == payload then
    added_here[job_id] = true
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
if added > 0 then
  redis.call('SET', KEYS[4], string.format('%.0f', stamp - 1))
  redis.call('XADD', KEYS[5], 'MAXLEN', '16', '*', 'n', added)
end
return out
