-- settle_sorted.lua: end one sorted-backend job's run in one step, only if this worker's
-- take of it is still the current one.
-- KEYS: [1] inflight, [2] payloads, [3] ranks, [4] deliveries, [5] owners, [6] delayed,
--       [7] the dead-letter stream, [8] the queue's wake stream, [9] the job's marker,
--       [10] the job's result key, [11] the final records' index (Keys.statuses), [12]
--       the job's claim (optional), [13], [14] the claim's older names (0.1's, 0.2's;
--       optional, with [12]; only with App(legacy_markers=True))
-- ARGV: [1] job id, [2] owner token of this take, [3] kind: 'done' | 'retry' | 'dead' | 'abandoned',
--       [4] claim token ('' when none), [5] claim action: 'done' | 'release' | 'keep',
--       [6] done marker TTL ms, [7] the done marker for the older names ('' when none),
--       [8] the done-marker buckets' prefix, [9] strings ('1': also the string marker
--       'd:<token>' under the claim key, App(legacy_markers=True)), [10] retry: next attempt
--       (encoded job), [11] retry: delay ms, [12] retry: boost (us of head start for its
--       level), [13] dead letters kept at most (0: no limit), [14] their max age ms (0: no
--       limit), [15] done and dead: the final record ('' for none), [16] its TTL ms, [17]
--       the job id (again), [18] its status shard (Keys.status_shard), [19] the result
--       record ('' for none), [20] its TTL ms, [21] flags: 'd' a
--       job of a debounced task (its next run, see _debounce.lua), 's' a job of a task
--       with a key_concurrency (its slot goes back, see _fair_sorted.lua), 'f<a><n>' a
--       flow's job (see settle_stream.lua; the flow's record is the last key), [22] a flow
--       job's result JSON ('' none), [23] the ending's history entry ('' none), [24] its
--       task's name in the history, [25..] dead: field/value pairs; with a history entry,
--       the last KEYS (before a flow's record) are the history list and its index (see
--       settle_stream.lua)
-- Touches: when owners[job id] is this take's token and the job is in flight: ZREM
--          inflight, HDEL owners and deliveries; done: HDEL payloads and ranks, DEL
--          marker, the final record kept (see _status.lua), the result record SET;
--          retry: payload and rank replaced, ZADD delayed at the server's clock + delay,
--          XADD wake; dead: HDEL payloads and ranks, XADD dead (trimmed), final and result
--          records as for done; done, retry and dead: the history entry pushed (see
--          _history.lua). A
--          worker whose lease lapsed (paused, cut off) finds another token and touches
--          nothing; 'abandoned' touches no job. The claim, whatever the owner: see
--          _settle_claim.lua.
-- Returns: {1 when the take was ours and settled else 0, 1 when the claim action applied,
--          and for a flow's job how many jobs of its flow it queued}
--#include _clock
--#include _settle_claim
--#include _dead_letter
--#include _marker
--#include _debounce_sorted
--#include _fair_sorted
--#include _flow
--#include _history
local flow, flow_action, flow_position
if ARGV[21] ~= '' then  -- a flow's job: its record is the last key, not a claim's
  flow_action, flow_position = string.match(ARGV[21], 'f(%a)(%d+)')
  if flow_action then flow = table.remove(KEYS) end
end
local history, history_index
if ARGV[23] and ARGV[23] ~= '' then  -- the history keys come after the claim's
  history_index = table.remove(KEYS)
  history = table.remove(KEYS)
end
local id, token, kind = ARGV[1], ARGV[2], ARGV[3]
local owned, released = 0, 0
if kind ~= 'abandoned' and redis.call('HGET', KEYS[5], id) == token
    and redis.call('ZSCORE', KEYS[1], id) then
  owned = 1
  redis.call('ZREM', KEYS[1], id)
  if string.find(ARGV[21], 's', 1, true) then  -- its slot goes back (see _fair_sorted.lua)
    local waiting = string.gsub(KEYS[1], 'inflight$', 'waiting')
    sorted_release(waiting, id, redis.call('HGET', KEYS[2], id))
  end
  redis.call('HDEL', KEYS[5], id)
  redis.call('HDEL', KEYS[4], id)
  if kind == 'retry' then
    local now = now_us()
    local delay = tonumber(ARGV[11])
    redis.call('HSET', KEYS[2], id, ARGV[10])
    redis.call('HSET', KEYS[3], id,
      string.format('%.0f', now + delay * 1000 - tonumber(ARGV[12])))
    redis.call('ZADD', KEYS[6], string.format('%.3f', (now + delay * 1000) / 1000), id)
    redis.call('XADD', KEYS[8], 'MAXLEN', '16', '*', 'due', ARGV[11])
  else
    redis.call('HDEL', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    if kind == 'dead' then add_dead_letter(KEYS[7], ARGV[13], ARGV[14], 25) end
    mark_end(KEYS[9], KEYS[11], ARGV[17], ARGV[18], ARGV[15], ARGV[16])
    if ARGV[19] ~= '' then redis.call('SET', KEYS[10], ARGV[19], 'PX', ARGV[20]) end
    if string.find(ARGV[21], 'd', 1, true) then
      debounce_next_sorted(KEYS[9], id, {payloads = KEYS[2], ranks = KEYS[3], delayed = KEYS[6]},
        KEYS[8])
    end
    if flow then released = flow_lib().settled(flow, flow_position, flow_action, ARGV[22],
      ARGV[14]) end
  end
  if history then record_end(history, history_index, ARGV[23], ARGV[24]) end
end
local claimed = settle_claim(KEYS[12], {KEYS[13], KEYS[14]}, ARGV[4], ARGV[5], ARGV[6], ARGV[7],
  ARGV[8], ARGV[9])
if flow then return {owned, claimed, released} end
return {owned, claimed}
