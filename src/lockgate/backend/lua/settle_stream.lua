-- settle_stream.lua: end one job's run in one step, only if this consumer still owns it.
-- KEYS: [1] the stream, [2] the job's marker, [3] the stream's delayed set, [4] the
--       dead-letter stream, [5] the namespace's wake stream, [6] the job's result key,
--       [7] the final records' index (Keys.statuses), [8] the job's claim (optional),
--       [9], [10] the claim's older names (0.1's, 0.2's; optional, with [8]; only with
--       App(legacy_markers=True))
-- ARGV: [1] group, [2] consumer, [3] entry id, [4] kind: 'done' | 'retry' | 'dead' | 'abandoned',
--       [5] claim token ('' when no claim), [6] claim action: 'done' | 'release' | 'keep',
--       [7] done marker TTL ms, [8] the done marker for the older names ('' when none),
--       [9] the done-marker buckets' prefix, [10] strings ('1': also the string marker
--       'd:<token>' under the claim key, App(legacy_markers=True)), [11] retry: next
--       attempt (encoded job), [12] retry: delay ms, [13] dead letters kept at most (0: no
--       limit), [14] dead letters' max age ms (0: no limit), [15] done and dead: the
--       final record ('' for none), [16] its TTL ms, [17] the job id, [18] its status
--       shard (Keys.status_shard), [19] the result record ('' for none), [20] its TTL
--       ms, [21] flags: 'd' a job of a debounced task (see _debounce.lua),
--       's' a job of a task with a key_concurrency, whose slot goes back, 'f<a><n>' the
--       job at position n of a flow (a: 'o' done, 'x' dead, 'c' cancelled; its record is
--       the last key, see _flow.lua) ('' for others), [22] a flow job's result JSON ('' none),
--       [23] the ending's history entry ('' for none: then no history keys), [24] its
--       task's name in the history, [25..] dead: the dead letter's field/value pairs;
--       with a history entry, the last KEYS (before a flow's record) are the history list
--       of the task and outcome (Keys.history) and the index (Keys.history_tasks)
-- Touches: when XPENDING says the entry is pending for this consumer: XACK + XDEL of the
--          entry; done: DEL marker, the final record kept (see _status.lua), the
--          result record SET; retry: ZADD delayed (due at the server's clock + delay),
--          the marker says so, and XADD wake (idle workers re-read their next due time);
--          dead: XADD dead (with MAXLEN ~ and XTRIM MINID ~), final and result records as
--          for done; a debounced job's next run, if an enqueue left one, queued (see
--          _debounce.lua); a flow job's barriers moved (see _flow.lua); done, retry and
--          dead: the history entry pushed (see _history.lua). An entry another
--          worker took over (this
--          one was paused or cut off past the visibility timeout) is not touched: a zombie's
--          settle cannot free a job that someone else is running.
--          'abandoned' (a run cut short) touches no entry, only the claim.
--          The claim, whatever the entry's owner: see _settle_claim.lua (done marker in
--          its bucket, and the older forms with legacy_markers; release; keep).
-- Order: XACK first. Under maxmemory with noeviction Redis refuses a script's first
-- memory-growing write but lets a script that already wrote finish, so ack before add.
-- Returns: {1 when the entry was ours and settled else 0, 1 when the claim action applied,
--          and for a flow's job how many jobs of its flow it queued}
--#include _clock
--#include _settle_claim
--#include _dead_letter
--#include _marker
--#include _fair
--#include _debounce
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
local stream, marker, delayed, dead, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local group, consumer, id, kind = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local owned, released = 0, 0
-- A stream or group that is gone (FLUSHALL, a restart without persistence): not ours.
local row = redis.pcall('XPENDING', stream, group, id, id, 1)
if row.err then row = {} end
if kind ~= 'abandoned' and #row == 1 and row[1][2] == consumer then
  owned = 1
  redis.call('XACK', stream, group, id)
  redis.call('XDEL', stream, id)
  -- A keyed job's slot goes back, and idle workers look for the jobs it held back.
  local flags = ARGV[21]
  if string.find(flags, 's', 1, true) and fair_release(stream, id) then
    redis.call('XADD', wake, 'MAXLEN', '16', '*', 'slot', '1')
  end
  if kind == 'retry' then
    local due = string.format('%.0f', now_ms() + tonumber(ARGV[12]))
    redis.call('ZADD', delayed, due, ARGV[11])
    redis.call('SET', marker, 'delayed ' .. due .. ' ' .. level_place_of(stream))
    redis.call('XADD', wake, 'MAXLEN', '16', '*', 'due', ARGV[12])
  else
    if kind == 'dead' then add_dead_letter(dead, ARGV[13], ARGV[14], 25) end
    mark_end(marker, KEYS[7], ARGV[17], ARGV[18], ARGV[15], ARGV[16])
    if ARGV[19] ~= '' then redis.call('SET', KEYS[6], ARGV[19], 'PX', ARGV[20]) end
    if string.find(flags, 'd', 1, true) then debounce_next(marker, ARGV[17], wake) end
    if flow then released = flow_lib().settled(flow, flow_position, flow_action, ARGV[22],
      ARGV[14]) end
  end
  if history then record_end(history, history_index, ARGV[23], ARGV[24]) end
end
local claimed = settle_claim(KEYS[8], {KEYS[9], KEYS[10]}, ARGV[5], ARGV[6], ARGV[7], ARGV[8],
  ARGV[9], ARGV[10])
if flow then return {owned, claimed, released} end
return {owned, claimed}
