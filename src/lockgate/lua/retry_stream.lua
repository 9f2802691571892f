-- retry_stream.lua: reschedule a failed job: ack and delete its entry and put the next
-- attempt in the stream's delayed set, in one step (a crash can lose or double neither).
-- KEYS: the stream, its delayed set
-- ARGV: group, entry id, encoded next attempt, delay in ms
-- Touches: XACK + XDEL of the entry; ZADD of the job, due at the server's clock + delay.
--          Nothing happens when the entry was no longer pending (already handled elsewhere).
--          The job's marker stays: the id is still taken while the job waits.
-- Returns: 1 when rescheduled, 0 when the entry was not pending.
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('XDEL', KEYS[1], ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[2], string.format('%.0f', now + tonumber(ARGV[4])), ARGV[3])
return 1
