-- _history.lua: a fragment, not a script. Included (--#include _history) by
-- settle_stream.lua and settle_sorted.lua, which keep each task's recent ends in the call
-- that settles the job (see lockgate.core.history).
-- A task's ends of one outcome (done, retried, dead) are a list (Keys.history), newest
-- first, of short entries the worker packs (a msgpack array of about 45 bytes: job id,
-- when it ended, run time, attempt, a failure's error cut to 200 characters). A list
-- grows to 1,100 entries, then is trimmed back to the newest 1,000 (history.KEEP,
-- history.SLACK): one LTRIM per 100 pushes instead of one per push; readers read the
-- newest 1,000. The lists have no TTL: there are at most three per task (the app's
-- tasks, and '?' for jobs of no known task), about 55 KB each when full.
-- The index (Keys.history_tasks) is a sorted set of the task names that have a list,
-- added to when a push makes a new list (score 0; a sorted set: ZADD is a command of the
-- documented ACL lines, SADD is not), so a reader finds the tasks without a SCAN.
-- record_end(list, index, entry, task): push the entry, trim, list the task. A refused
-- push (an ACL user of lockgate 0.3's lines, without +lpush) keeps no history and
-- settles the job all the same.
local function record_end(list, index, entry, task)
  local count = redis.pcall('LPUSH', list, entry)
  if type(count) ~= 'number' then return end
  if count == 1 then
    redis.call('ZADD', index, 0, task)
  elseif count > 1100 then
    redis.pcall('LTRIM', list, 0, 999)
  end
end
