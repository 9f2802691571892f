-- progress_write.lua: the latest progress of a worker's running jobs, in one write.
-- KEYS: the jobs' progress keys (Keys.progress)
-- ARGV: [1] how long each is kept, ms; then, per key, its value (the JSON [value, note])
-- Touches only the progress keys: a write landing after its job ended leaves the job's
-- status as it is (it keeps that run's last value, as a write before the end would).
local ttl = ARGV[1]
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], ARGV[i + 1], 'PX', ttl)
end
return #KEYS
