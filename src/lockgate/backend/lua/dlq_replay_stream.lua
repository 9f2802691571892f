-- dlq_replay_stream.lua: replay one dead letter on the streams backend: if the letter is
-- still there, delete it and enqueue its job, in one step; if not, nothing (see
-- _replay.lua).
-- KEYS: the dead-letter stream of the job's partition, then enqueue_stream.lua's KEYS for
--       the one job (its marker, stream, delayed set, once-only key; the wake stream)
-- ARGV: the letter's entry id, then enqueue_stream.lua's ARGV for the job (encoded job,
--       delay ms, once-only TTL ms)
-- Touches: the letter (XRANGE, then XDEL when the job was added) and what
--          enqueue_stream.lua touches.
-- Returns: 'gone' when the letter is not there; else enqueue_stream.lua's reply: {entry id
-- or 'delayed'}, or {0} when the job's id is queued or running (the letter stays).
local function enqueue(KEYS, ARGV)
--#include enqueue_stream
end
--#include _replay
return replay_letter(enqueue)
