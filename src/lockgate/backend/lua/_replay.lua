-- _replay.lua: a fragment, not a script. Included (--#include _replay) by
-- dlq_replay_stream.lua and dlq_replay_sorted.lua, after each has made its backend's
-- enqueue script a function, enqueue(KEYS, ARGV) (the script's own text as its body, so
-- a replay enqueues exactly as an enqueue does, dedup and wake-up included).
-- replay_letter(enqueue): KEYS[1] is a dead-letter stream and ARGV[1] a letter's entry id
-- in it; the rest of KEYS and ARGV are enqueue's, for the letter's one job. When the
-- letter is there, enqueue runs, and the letter is deleted once the job was added (its id
-- taken: the letter stays). Returns enqueue's reply, or 'gone' when the letter is not
-- there (replayed or removed by someone else): then nothing is done, so two replays of
-- one letter never enqueue its job twice.
local function replay_letter(enqueue)
  local dead, entry = KEYS[1], ARGV[1]
  if #redis.call('XRANGE', dead, entry, entry) == 0 then return 'gone' end
  local keys, args = {}, {}
  for i = 2, #KEYS do keys[i - 1] = KEYS[i] end
  for i = 2, #ARGV do args[i - 1] = ARGV[i] end
  local reply = enqueue(keys, args)
  if reply[1] ~= 0 then redis.call('XDEL', dead, entry) end
  return reply
end
