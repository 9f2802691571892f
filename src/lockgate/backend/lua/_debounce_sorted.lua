-- _debounce_sorted.lua: a fragment, not a script. Included (--#include _debounce_sorted)
-- by the sorted backend's enqueue and settle scripts: debounce there (see _debounce.lua,
-- whose due times and next runs it shares).
-- debounce_enqueue_sorted(marker, q, id, boost, job, spec, placed, now) -> the enqueue's
--   reply for a debounced job ('delayed', 'merged' or 'next', as debounce_enqueue's);
--   q: {waiting, payloads, ranks, delayed} keys; spec: '<wait ms> <cap ms>'.
-- debounce_next_sorted(marker, id, q, wake): at a debounced job's end (after its marker
--   went), queue the next run if an enqueue left one (q: {payloads, ranks, delayed}).
--#include _debounce
--#include _fair_sorted

-- Sorted backend: the job waits in the queue's delayed set by id, its payload and rank
-- (its due time in us less its level's boost) in their hashes.
local function debounce_put_sorted(marker, q, id, job, due, boost)
  redis.call('SET', marker, 'sorted ' .. queue_of(q.payloads))
  redis.call('HSET', q.payloads, id, job)
  redis.call('HSET', q.ranks, id, ms(tonumber(due) * 1000 - tonumber(boost)))
  redis.call('ZADD', q.delayed, due, id)
end

local function debounce_enqueue_sorted(marker, q, id, boost, job, spec, placed, now)
  local wait, cap = string.match(spec, '^(%d+) (%d+)')
  wait, cap = tonumber(wait), tonumber(cap)
  local _, first_key, next_key = debounce_names(marker, id)
  local was = 'gone'
  if placed then
    local inflight = string.gsub(q.waiting, 'waiting$', 'inflight')
    if redis.call('ZSCORE', inflight, id) then
      return debounce_queue_next(next_key, job, now, wait, cap, boost)
    end
    -- Wherever it waits: the ranked set (a key's head: its next job takes its place),
    -- delayed, its key's lane, or parked (see _fair_sorted.lua).
    local old = redis.call('HGET', q.payloads, id)
    if redis.call('ZREM', q.waiting, id) == 1 then
      sorted_promote(q.waiting, id, old, now * 1000)
      was = 'removed'
    elseif redis.call('ZREM', q.delayed, id) == 1 or sorted_unlane(q.waiting, id, old)
        or sorted_unpark(q.waiting, id, old) then
      was = 'removed'
    end
  end
  local due = ms(debounce_due(first_key, was == 'removed', now, wait, cap))
  debounce_put_sorted(marker, q, id, job, due, boost)
  return was == 'removed' and 'merged' or 'delayed'
end

local function debounce_next_sorted(marker, id, q, wake)
  local job, due, boost = debounce_take_next(marker, id)
  if not job then return end
  debounce_put_sorted(marker, q, id, job, due, boost)
  redis.call('XADD', wake, 'MAXLEN', '16', '*', 'due', '1')
end
