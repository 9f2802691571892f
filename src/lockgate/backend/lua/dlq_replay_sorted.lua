-- dlq_replay_sorted.lua: replay one dead letter on the sorted backend: if the letter is
-- still there, delete it and enqueue its job, in one step; if not, nothing (see
-- _replay.lua).
-- KEYS: the dead-letter stream, then enqueue_sorted.lua's KEYS for the one job (waiting,
--       payloads, ranks, clock, wake, delayed of its queue; its marker and once-only key)
-- ARGV: the letter's entry id, then enqueue_sorted.lua's ARGV for the job (job id, boost
--       us, encoded job, delay ms, once-only TTL ms)
-- Touches: the letter (XRANGE, then XDEL when the job was added) and what
--          enqueue_sorted.lua touches.
-- Returns: 'gone' when the letter is not there; else enqueue_sorted.lua's reply: {1}, or
-- {0} when the job's id is queued or running (the letter stays).
local function enqueue(KEYS, ARGV)
--#include enqueue_sorted
end
--#include _replay
return replay_letter(enqueue)
